package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// archiveURL returns the archive's URL: --archive, else $FLIGHTDECK_ARCHIVE_URL, else the
// content of the file named by $FLIGHTDECK_ARCHIVE_URL_FILE, which keeps a password in a
// secret. It returns "" for none. Setting both variables is an error.
func archiveURL(flagURL string, getenv func(string) string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	v, f := getenv("FLIGHTDECK_ARCHIVE_URL"), getenv("FLIGHTDECK_ARCHIVE_URL_FILE")
	switch {
	case v != "" && f != "":
		return "", errors.New("set FLIGHTDECK_ARCHIVE_URL or FLIGHTDECK_ARCHIVE_URL_FILE, not both")
	case f != "":
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("FLIGHTDECK_ARCHIVE_URL_FILE: %w", err)
		}
		if v = strings.TrimSpace(string(b)); v == "" {
			return "", fmt.Errorf("FLIGHTDECK_ARCHIVE_URL_FILE %s is empty", f)
		}
	}
	return v, nil
}

// archiveDeployment returns the archive deployment of a consumer: --archive-deployment, whose
// default is $FLIGHTDECK_ARCHIVE_DEPLOYMENT, else the key prefix. An empty prefix stands for
// the default one.
func archiveDeployment(flagValue, prefix string) string {
	switch {
	case flagValue != "":
		return flagValue
	case prefix != "":
		return prefix
	}
	return topics.DefaultPrefix
}

// openArchive returns the archive of cfg with its schema applied. An archive that does not
// answer at start is a warning, not an error: outcomes are spooled until it answers, and the
// schema is applied then. With adopt, once the schema is applied, it moves the legacy rows of
// tenants into the deployment with postgres.Store.AdoptLegacy and logs how many. No tenants
// means all of them.
func openArchive(ctx context.Context, log *zerolog.Logger, cfg postgres.Config, adopt bool, tenants []string) (*postgres.Store, error) {
	s, err := postgres.New(cfg)
	if err != nil {
		return nil, err
	}
	url := cfg.URL
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Migrate(mctx); err != nil {
		log.Warn().Str("archive", redisconn.RedactURL(url)).Str("error", redisconn.RedactError(err, url).Error()).
			Msg("archive unreachable at start: outcomes are spooled until it answers")
		if adopt {
			log.Error().Str("deployment", cfg.Deployment).
				Msg("archive: legacy rows not adopted (the archive did not answer at start); start again with --archive-adopt-legacy")
		}
		return s, nil
	}
	log.Info().Str("archive", redisconn.RedactURL(url)).Str("deployment", cfg.Deployment).Msg("archive ready")
	if adopt {
		// One statement per table over every legacy row: a large archive takes a while.
		actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		n, err := s.AdoptLegacy(actx, tenants)
		if err != nil {
			log.Error().Str("error", redisconn.RedactError(err, url).Error()).Str("deployment", cfg.Deployment).
				Msg("archive: adopting legacy rows failed; start again with --archive-adopt-legacy")
		} else {
			log.Info().Int64("rows", n).Str("deployment", cfg.Deployment).Strs("tenants", tenants).
				Msg("archive: adopted legacy rows")
		}
	}
	return s, nil
}
