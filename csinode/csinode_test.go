package csinode

import (
	"errors"
	"strings"
	"testing"
)

// A view is named by its arguments and secrets: equal sets share a daemon,
// and a change of either one, or of a secret's value, is another view.
func TestViewKey(t *testing.T) {
	args := []string{"--batch-size=16", "--seed=7", "train"}
	sec := map[string]string{"access_key_id": "a", "secret_access_key": "s"}
	k := viewKey(args, sec)
	if k != viewKey(append([]string(nil), args...), map[string]string{"secret_access_key": "s", "access_key_id": "a"}) {
		t.Fatal("equal arguments and secrets, in another map order, gave another key")
	}
	others := []string{
		viewKey([]string{"--batch-size=16", "--seed=8", "train"}, sec),
		viewKey(args, map[string]string{"access_key_id": "a", "secret_access_key": "t"}),
		viewKey(args, nil),
		viewKey([]string{"--batch-size=16", "--seed=7train"}, sec), // arguments are delimited
	}
	seen := map[string]bool{k: true}
	for i, o := range others {
		if seen[o] {
			t.Fatalf("other view %d has a key already seen: %s", i, o)
		}
		seen[o] = true
	}
}

func TestReadyLine(t *testing.T) {
	for _, tc := range []struct {
		kind string
		err  error
	}{{"", nil}, {KindNotFound, errors.New("dataset not found:\nno store holds x")}, {KindDenied, errors.New("refused: a: b")}} {
		ready, kind, msg := ParseReadyLine(ReadyLine(tc.kind, tc.err))
		if ready != (tc.err == nil) || (tc.err != nil && (kind != tc.kind || msg != strings.ReplaceAll(tc.err.Error(), "\n", "; "))) {
			t.Errorf("%q: parsed as %v %q %q", ReadyLine(tc.kind, tc.err), ready, kind, msg)
		}
	}
	if ready, kind, msg := ParseReadyLine(""); ready || kind != KindFailed || msg != "" {
		t.Errorf("no line (the daemon died): %v %q %q", ready, kind, msg)
	}
}

// Secrets: only the three keys, both halves of a key pair, and an error
// that names a key, never a value.
func TestCheckSecrets(t *testing.T) {
	if s, err := checkSecrets(nil); s != nil || err != nil {
		t.Fatalf("no secrets: %v %v", s, err)
	}
	if _, err := checkSecrets(map[string]string{"access_key_id": "a", "secret_access_key": "s", "session_token": "t"}); err != nil {
		t.Fatal(err)
	}
	_, err := checkSecrets(map[string]string{"access_key_id": "a", "password": "hunter2"})
	if err == nil || !strings.Contains(err.Error(), "password") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := checkSecrets(map[string]string{"access_key_id": "a"}); err == nil || !strings.Contains(err.Error(), "secret_access_key") {
		t.Fatalf("half a key pair: %v", err)
	}
}

// A daemon of a view with secrets inherits no credential from the plugin's
// environment, nor the plugin's own shardfs settings.
func TestDaemonEnv(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "plugin-secret")
	t.Setenv("SHARDFS_STORES", "file:///x")
	t.Setenv("KEEP_ME", "1")
	env := strings.Join(daemonEnv(true), "\n")
	if strings.Contains(env, "plugin-secret") || strings.Contains(env, "SHARDFS_STORES") || !strings.Contains(env, "KEEP_ME=1") || !strings.Contains(env, ReadyFDEnv+"=3") {
		t.Fatalf("daemon env with secrets:\n%s", env)
	}
	if env := strings.Join(daemonEnv(false), "\n"); !strings.Contains(env, "AWS_SECRET_ACCESS_KEY=plugin-secret") {
		t.Fatal("a view without secrets must use the plugin's own credentials")
	}
}
