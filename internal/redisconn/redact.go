package redisconn

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// redacted replaces every secret part of a URL.
const redacted = "xxxxx"

// RedactURL returns rawURL fit for a log line or an error message. It works for any URL,
// such as a Redis URL or an OpenAI base URL. A password becomes "xxxxx", as in
// user:xxxxx@host. A user without a password becomes "xxxxx" too, because go-redis takes a
// lone user as the password, as in redis://secret@host. So do the values of query
// parameters whose names suggest a secret, such as password, pass, secret, token, key or
// auth. A URL that does not parse keeps only its scheme and what follows its last "@" up
// to the path, with " (malformed)" added, or becomes "<malformed URL>".
func RedactURL(rawURL string) string {
	if rawURL == "" {
		return ""
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return redactUnparsed(rawURL)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		} else {
			u.User = url.User(redacted)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if secretParam(k) {
				q[k] = []string{redacted}
			}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// secretParam reports whether a query parameter's name suggests a secret value.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"pass", "secret", "token", "key", "auth", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func redactUnparsed(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, " \t\r\n@/") {
		return "<malformed URL>"
	}
	host, hadUser := rest, false
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		host, hadUser = rest[i+1:], true
	}
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	host = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, host)
	if hadUser {
		return scheme + "://" + redacted + "@" + host + " (malformed)"
	}
	return scheme + "://" + host + " (malformed)"
}

// secrets returns the parts of rawURL that must never be shown, each as decoded and as
// written in the URL. They are the password, a lone user, and the values of secret-looking
// query parameters. For a URL that does not parse, they are everything between "://" and
// the last "@".
func secrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		if s != "" && s != redacted && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		if i, j := strings.Index(rawURL, "://"), strings.LastIndex(rawURL, "@"); i >= 0 && j > i+3 {
			userinfo := rawURL[i+3 : j]
			add(userinfo)
			_, pw, ok := strings.Cut(userinfo, ":")
			if ok {
				add(pw)
			}
			for _, s := range []string{userinfo, pw} {
				if d, err := url.PathUnescape(s); err == nil {
					add(d)
				}
			}
		}
		return out
	}
	if u.User != nil {
		// The userinfo as written is the authority up to its last "@". The authority runs
		// from after "//" up to the path, query or fragment.
		raw := ""
		if i := strings.Index(rawURL, "//"); i >= 0 {
			auth := rawURL[i+2:]
			if j := strings.IndexAny(auth, "/?#"); j >= 0 {
				auth = auth[:j]
			}
			if j := strings.LastIndex(auth, "@"); j >= 0 {
				raw = auth[:j]
			}
		}
		if pw, ok := u.User.Password(); ok {
			add(pw)
			if _, rawPw, ok := strings.Cut(raw, ":"); ok {
				add(rawPw)
			}
		} else {
			add(u.User.Username())
			add(raw)
		}
	}
	for k, vs := range u.Query() {
		if secretParam(k) {
			for _, v := range vs {
				add(v)
				add(url.QueryEscape(v))
			}
		}
	}
	return out
}

// RedactError returns err with rawURL replaced in its message by the RedactURL form, and
// every secret RedactURL hides replaced by "xxxxx", also where the message quotes them. It
// returns err itself when its message holds none. A redacted error keeps only its message,
// because its chain would still hold the secret.
func RedactError(err error, rawURL string) error {
	if err == nil || rawURL == "" {
		return err
	}
	msg := err.Error()
	out := msg
	quoted := func(s string) string { q := strconv.Quote(s); return q[1 : len(q)-1] }
	safe := RedactURL(rawURL)
	out = strings.ReplaceAll(out, rawURL, safe)
	out = strings.ReplaceAll(out, quoted(rawURL), quoted(safe))
	for _, s := range secrets(rawURL) {
		out = strings.ReplaceAll(out, s, redacted)
		out = strings.ReplaceAll(out, quoted(s), redacted)
	}
	if out == msg {
		return err
	}
	return errors.New(out)
}
