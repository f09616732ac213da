// Package redisconn turns Flightdeck's Redis settings into go-redis clients: the URL from a
// flag, REDIS_URL or REDIS_URL_FILE, TLS files from REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE and
// REDIS_TLS_KEY_FILE, and one fresh *redis.Options per client.
//
// A URL may carry an ACL user and a password, as in redis://user:password@host:6379/0. It
// selects TLS with the rediss:// scheme. No error of this package repeats a URL or a
// password.
package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// DefaultURL is used when no URL is given anywhere.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns the Redis URL: flagURL when set, else $REDIS_URL, else the contents of the
// file named by $REDIS_URL_FILE, else DefaultURL. The file means a password need not appear
// in a process listing. getenv is os.Getenv in production.
func URL(flagURL string, getenv func(string) string) (string, error) {
	if flagURL != "" {
		return flagURL, nil
	}
	if u := getenv("REDIS_URL"); u != "" {
		return u, nil
	}
	if f := getenv("REDIS_URL_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("redisconn: REDIS_URL_FILE: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return DefaultURL, nil
}

// Options parses a redis:// or rediss:// URL. The error never repeats the URL, which may hold
// a password. A rediss:// URL verifies the server against the system's root CAs. Use
// OptionsWithTLS or OptionsFromEnv for a private CA or a client certificate.
func Options(url string) (*redis.Options, error) {
	return OptionsWithTLS(url, TLSFiles{})
}

// TLSFiles names the PEM files of a TLS connection to Redis. The zero value adds nothing to
// what the URL says.
type TLSFiles struct {
	// CAFile holds the CA certificates that sign the server's certificate. They replace the
	// system's root CAs. Env REDIS_TLS_CA_FILE. Defaults to the system's roots.
	CAFile string
	// CertFile and KeyFile hold the client certificate and its private key, for a server
	// that verifies clients with redis-server --tls-auth-clients yes. Set both or neither.
	// Env REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE. Default to none.
	CertFile, KeyFile string
}

// IsZero reports whether f names no file.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// TLSFilesFromEnv reads REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE through
// getenv, which is os.Getenv in production.
func TLSFilesFromEnv(getenv func(string) string) TLSFiles {
	return TLSFiles{CAFile: getenv("REDIS_TLS_CA_FILE"), CertFile: getenv("REDIS_TLS_CERT_FILE"),
		KeyFile: getenv("REDIS_TLS_KEY_FILE")}
}

// OptionsFromEnv is OptionsWithTLS with the files TLSFilesFromEnv reads through getenv. It
// is a drop-in for Options in commands, which pass os.Getenv.
func OptionsFromEnv(url string, getenv func(string) string) (*redis.Options, error) {
	return OptionsWithTLS(url, TLSFilesFromEnv(getenv))
}

// OptionsWithTLS parses a redis:// or rediss:// URL and applies files to its TLS settings.
// The CA file replaces the system's root CAs, and the certificate and key are presented to
// the server. Files require a rediss:// URL, because with redis:// the connection would
// silently stay in plain text, so that is an error. TLS 1.2 is the minimum. The server name
// checked is the URL's host. go-redis's skip_verify=true query option turns checking off.
// It is for tests only, and an error together with any file. The error never repeats the
// URL, which may hold a password.
func OptionsWithTLS(url string, files TLSFiles) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisconn: invalid Redis URL: %w", redact(err, url))
	}
	if opt.TLSConfig, err = withTLSFiles(opt.TLSConfig, files); err != nil {
		return nil, err
	}
	return opt, nil
}

// UniversalFromEnv is Universal with the TLS files TLSFilesFromEnv reads through getenv
// applied, for a single-node or a cluster URL. It is a drop-in for Universal in commands,
// which pass os.Getenv.
func UniversalFromEnv(rawURL string, getenv func(string) string) (func() redis.UniversalClient, error) {
	return UniversalWithTLS(rawURL, TLSFilesFromEnv(getenv))
}

// UniversalWithTLS is Universal with files applied as OptionsWithTLS does. For a cluster
// they apply to the connections to every node. For Sentinel they apply to the sentinels and
// the master. Errors never repeat the URL.
func UniversalWithTLS(rawURL string, files TLSFiles) (func() redis.UniversalClient, error) {
	if IsFailover(rawURL) {
		opt, err := failoverOptions(rawURL, files)
		if err != nil {
			return nil, err
		}
		return func() redis.UniversalClient { return NewFailoverClient(opt) }, nil
	}
	if !IsCluster(rawURL) {
		opt, err := OptionsWithTLS(rawURL, files)
		if err != nil {
			return nil, err
		}
		return Factory(opt), nil
	}
	opt, err := redis.ParseClusterURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisconn: invalid Redis Cluster URL: %w", redact(err, rawURL))
	}
	if opt.TLSConfig, err = withTLSFiles(opt.TLSConfig, files); err != nil {
		return nil, err
	}
	return func() redis.UniversalClient { return NewClusterClient(opt) }, nil
}

// withTLSFiles applies files to cfg, the TLS configuration parsed from a URL. cfg is nil
// for redis://.
func withTLSFiles(cfg *tls.Config, files TLSFiles) (*tls.Config, error) {
	if files.IsZero() {
		return cfg, nil
	}
	if cfg == nil {
		return nil, errors.New("redisconn: REDIS_TLS_* files are set but the Redis URL is not rediss://")
	}
	if cfg.InsecureSkipVerify {
		// The CA file is there to check the server, and the client certificate to be
		// trusted by it. skip_verify would quietly undo that.
		return nil, errors.New("redisconn: the Redis URL has skip_verify=true, which turns off the server certificate " +
			"check that REDIS_TLS_* files are set up for: remove skip_verify from the URL, or the files")
	}
	cfg = cfg.Clone()
	if files.CAFile != "" {
		pem, err := os.ReadFile(files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redisconn: REDIS_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisconn: REDIS_TLS_CA_FILE %s: no PEM certificate in it", files.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case files.CertFile != "" && files.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			// The error names the files and what is wrong, never key material.
			return nil, fmt.Errorf("redisconn: REDIS_TLS_CERT_FILE/REDIS_TLS_KEY_FILE: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case files.CertFile != "" || files.KeyFile != "":
		return nil, errors.New("redisconn: REDIS_TLS_CERT_FILE and REDIS_TLS_KEY_FILE go together")
	}
	return cfg, nil
}

// redact returns err without the URL or its password, since url.Parse errors quote the
// whole URL.
func redact(err error, raw string) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = fmt.Errorf("%s: malformed URL", ue.Op)
	}
	return RedactError(err, raw)
}

// NewClient returns a client on a copy of opt, because go-redis keeps per-client state in
// Options and clients must not share one. With ContextTimeoutEnabled, context deadlines
// bound every command, so a coordination budget holds even against a Redis that stopped
// answering. Maintenance notifications, a Redis Enterprise feature, are off.
func NewClient(opt *redis.Options) *redis.Client {
	o := *opt
	o.ContextTimeoutEnabled = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&o)
}

// Factory returns a function that makes a new client on opt at every call.
func Factory(opt *redis.Options) func() redis.UniversalClient {
	return func() redis.UniversalClient { return NewClient(opt) }
}
