package main

import "testing"

// TestMonitorGODEBUG: the consumer adds schedtrace to whatever GODEBUG holds, and leaves a
// GODEBUG that names schedtrace, zero included, as it is.
func TestMonitorGODEBUG(t *testing.T) {
	for _, c := range []struct {
		env, want string
		exec      bool
	}{
		{"", monitorAwake, true},
		{"http2client=0", "http2client=0," + monitorAwake, true},
		{"gctrace=1,madvdontneed=1", "gctrace=1,madvdontneed=1," + monitorAwake, true},
		{"xschedtrace=1", "xschedtrace=1," + monitorAwake, true},
		{"schedtrace=0", "", false},
		{"gctrace=1,schedtrace=1000", "", false},
		{"schedtrace=2147483647", "", false},
	} {
		got, exec := monitorGODEBUG(c.env)
		if got != c.want || exec != c.exec {
			t.Errorf("monitorGODEBUG(%q) = %q %v, want %q %v", c.env, got, exec, c.want, c.exec)
		}
	}
}
