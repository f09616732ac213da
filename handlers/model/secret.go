package model

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
)

// redacted is what a non-empty Secret prints as, and what replaces the API key in a provider's
// error message.
const redacted = "[REDACTED]"

// Secret holds a credential. fmt, encoding/json and log/slog print it as "[REDACTED]", or as ""
// when it is empty. fmt does so for every verb, %#v included, also when the Secret sits in an
// unexported field. Only Reveal returns the value. The zero value is the empty Secret. A Secret
// is immutable and safe for concurrent use.
type Secret struct {
	// p is a pointer so that fmt, which does not call methods on unexported fields, prints
	// an address there instead of the value.
	p *string
}

// NewSecret returns a Secret holding s.
func NewSecret(s string) Secret { return Secret{p: &s} }

// Reveal returns the secret value, or "" for the zero Secret.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// String returns "[REDACTED]", or "" when the secret is empty.
func (s Secret) String() string {
	if s.Reveal() == "" {
		return ""
	}
	return redacted
}

// Format prints String for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalJSON encodes String as a JSON string.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// LogValue returns String, for log/slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }
