package main

import (
	"os"
	"runtime"
	"strings"
	"syscall"
)

// monitorAwake is the GODEBUG setting the consumer runs under unless GODEBUG names schedtrace
// itself. Any schedtrace above zero keeps the Go runtime's system monitor out of its deep
// sleep; this one is the largest the runtime takes, so its scheduler line is printed at most
// once every 24.8 days. See docs/DESIGN.md, section 5.
const monitorAwake = "schedtrace=2147483647"

// monitorGODEBUG returns the GODEBUG value to start the consumer again with, given the one it
// has, and false when it has one that already names schedtrace, which then stays.
func monitorGODEBUG(env string) (string, bool) {
	if env == "" {
		return monitorAwake, true
	}
	for _, field := range strings.Split(env, ",") {
		if key, _, _ := strings.Cut(field, "="); key == "schedtrace" {
			return "", false
		}
	}
	return env + "," + monitorAwake, true
}

// keepMonitorAwake replaces the process with itself under monitorGODEBUG's setting, keeping its
// process id, name, arguments and the rest of its environment. The runtime reads GODEBUG's
// schedtrace only at start, hence the exec. When GODEBUG already names schedtrace, or no exec
// succeeds, it returns and the consumer runs as it is.
func keepMonitorAwake() {
	godebug, ok := monitorGODEBUG(os.Getenv("GODEBUG"))
	if !ok {
		return
	}
	env := []string{"GODEBUG=" + godebug}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	// The binary's own path first, so that the process keeps its name (ps, top, pgrep); then,
	// on Linux, the running binary itself, for when its file was removed or replaced since.
	if exe, err := os.Executable(); err == nil {
		_ = syscall.Exec(exe, os.Args, env) // returns only when the exec failed
	}
	if runtime.GOOS == "linux" {
		_ = syscall.Exec("/proc/self/exe", os.Args, env)
	}
}
