package main

import "testing"

// TestGCPercent: the flag wins, GOGC stays when the flag is unset, and the consumer's default
// applies when neither is set; a bad value is a usage error.
func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		flag, env string
		want      int
		apply     bool
		bad       bool
	}{
		{"", "", defaultGCPercent, true, false},
		{"", "100", 0, false, false},
		{"", "off", 0, false, false},
		{"200", "100", 200, true, false},
		{"0", "", 0, true, false},
		{"off", "", -1, true, false},
		{"-5", "", 0, false, true},
		{"lots", "", 0, false, true},
	} {
		p, apply, err := gcPercent(c.flag, c.env)
		if (err != nil) != c.bad || p != c.want || apply != c.apply {
			t.Errorf("gcPercent(%q, GOGC=%q) = %d %v %v, want %d %v bad=%v", c.flag, c.env, p, apply, err, c.want, c.apply, c.bad)
		}
	}
}
