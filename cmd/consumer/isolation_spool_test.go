package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// runRefused runs the consumer binary with args and env (on top of this process's, without
// REDIS_*, FLIGHTDECK_*, HOME and XDG_* variables), expects it to exit on its own within 30 s,
// and returns its exit code and output.
func runRefused(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "FLIGHTDECK_") &&
			!strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("consumer %v kept running; it should have refused to start:\n%s", args, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestSpoolIsNeverTrustedBlindly: uncertain outcomes in a spool directory are written back to
// Redis as the consumer's own, so a consumer never takes a directory another user could have
// written: with HOME and XDG_STATE_HOME unset there is no shared fallback such as /tmp, and a
// directory owned by someone else or writable by others is refused, naming it and its mode,
// before anything planted there reaches Redis.
func TestSpoolIsNeverTrustedBlindly(t *testing.T) {
	e := newE2E(t)
	base := []string{"--prefix", e.prefix, "--config", e.config, "--stages", "interview-evaluation",
		"--redis-wait", "0", "--name", "c1"}

	code, out := runRefused(t, []string{"REDIS_URL=" + e.url}, base...)
	if code == 0 || !strings.Contains(out, "--spool-dir") {
		t.Fatalf("no spool directory configured and none derivable: exit %d\n%s\nwant a refusal naming --spool-dir", code, out)
	}

	if os.Geteuid() != 0 {
		t.Skip("the planted-directory case needs root (to give the directory to another user)")
	}
	// User nobody made the directory first, open to all, and planted a forged outcome of
	// tenant beta there.
	shared := filepath.Join(t.TempDir(), "flightdeck-spool")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	forged := topics.Task{TaskID: "b1", Stage: "interview-evaluation", Tenant: "beta", RequestKey: "q-7",
		Input: json.RawMessage(`{"q":1}`)}
	key := keyOf(t, forged)
	line, _ := json.Marshal(map[string]any{"v": 1, "stage": forged.Stage, "tenant": "beta", "key": key,
		"token": time.Now().UnixMicro(), "ownerId": "x", "attempts": 1,
		"result": []byte(`{"forged":"by nobody"}`), "resultTTLMs": 600000})
	for _, dir := range []string{shared, filepath.Join(shared, e.prefix)} {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "spool-dead.jsonl"), append(line, '\n'), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.Walk(shared, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, 65534, 65534)
	}); err != nil {
		t.Fatal(err)
	}
	code, out = runRefused(t, []string{"REDIS_URL=" + e.url}, append(base, "--spool-dir", shared)...)
	if code == 0 || !strings.Contains(out, shared) || !strings.Contains(out, "not safe to trust") {
		t.Fatalf("a spool directory of user nobody, mode 0777: exit %d\n%s\nwant a refusal naming it", code, out)
	}
	if n := e.rdb.Exists(e.ctx, e.ks.Flight(key), e.ks.Flight(key)).Val(); n != 0 {
		t.Fatalf("the planted outcome reached Redis (%d keys of %s)", n, key)
	}
}
