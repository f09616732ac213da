package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinTokenLen is the shortest token secret a tokens file may name through token_file, in
// bytes. `openssl rand -hex 32` makes a good one.
const MinTokenLen = 16

// tokensFile is the layout of a tokens file.
type tokensFile struct {
	Tokens []tokenEntry `yaml:"tokens"`
}

// tokenEntry is one entry of a tokens file: the token's SHA-256, or a file holding the token.
type tokenEntry struct {
	Name       string         `yaml:"name"`
	SHA256     string         `yaml:"sha256"`
	TokenFile  string         `yaml:"token_file"`
	Tenant     string         `yaml:"tenant"`
	Prefix     string         `yaml:"prefix"`
	Partitions map[string]int `yaml:"partitions"`
}

// LoadTokens reads a tokens file, YAML or JSON, and returns its tokens. Each entry names a
// tenant, optionally a key prefix, a name and partitions, and either the hex SHA-256 of the
// token (sha256) or a file that holds the token itself (token_file, relative to the tokens
// file's directory), so that the token can be a mounted secret. Errors wrap ErrConfig and
// never repeat a token.
func LoadTokens(path string) ([]Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: tokens file: %w", ErrConfig, err)
	}
	return ParseTokens(b, filepath.Dir(path))
}

// ParseTokens parses the content of a tokens file as LoadTokens does. Relative token_file
// paths are read from dir.
func ParseTokens(data []byte, dir string) ([]Token, error) {
	var f tokensFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: tokens file: %w", ErrConfig, err)
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("%w: the tokens file lists no tokens", ErrConfig)
	}
	out := make([]Token, 0, len(f.Tokens))
	for i, e := range f.Tokens {
		name := e.Name
		if name == "" {
			name = e.Tenant
		}
		t := Token{Name: name, Tenant: e.Tenant, Prefix: e.Prefix, Partitions: e.Partitions}
		switch {
		case e.SHA256 != "" && e.TokenFile != "":
			return nil, fmt.Errorf("%w: token %d (%s): set sha256 or token_file, not both", ErrConfig, i+1, name)
		case e.SHA256 != "":
			sum, err := hex.DecodeString(strings.TrimSpace(e.SHA256))
			if err != nil || len(sum) != sha256.Size {
				return nil, fmt.Errorf("%w: token %d (%s): sha256 is not 64 hex digits", ErrConfig, i+1, name)
			}
			copy(t.SHA256[:], sum)
		case e.TokenFile != "":
			p := e.TokenFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("%w: token %d (%s): token_file: %w", ErrConfig, i+1, name, err)
			}
			secret := strings.TrimSpace(string(b))
			if len(secret) < MinTokenLen {
				return nil, fmt.Errorf("%w: token %d (%s): token_file %s holds %d bytes; a token needs at least %d (generate one with `openssl rand -hex 32`)",
					ErrConfig, i+1, name, p, len(secret), MinTokenLen)
			}
			t.SHA256 = HashToken(secret)
		default:
			return nil, fmt.Errorf("%w: token %d (%s): set sha256 or token_file", ErrConfig, i+1, name)
		}
		out = append(out, t)
	}
	return out, nil
}
