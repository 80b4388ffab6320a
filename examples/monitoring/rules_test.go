// Package monitoring holds the Prometheus alert rules shipped for shardfs
// mounts; its tests check and unit-test them with Debian's promtool.
package monitoring

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: promtool is missing (Debian package prometheus): %v", err)
		}
		t.Skipf("promtool is missing (apt-get install prometheus): %v", err)
	}
	return p
}

// The rules parse (promtool check rules) and fire exactly as their unit
// tests say: a slow store and a store down name the store, a starving
// rank names the rank, thrash alerts after two minutes, stalls at 30%
// of the time alert and 5% do not, one checksum failure alerts.
func TestAlertRules(t *testing.T) {
	tool := promtool(t)
	out, err := exec.Command(tool, "check", "rules", "shardfs-alerts.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS: 8 rules found") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	out, err = exec.Command(tool, "test", "rules", "shardfs-alerts_test.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// A rule whose threshold is broken on purpose fails its unit test: the
// test above can fail.
func TestAlertRulesCanFail(t *testing.T) {
	tool := promtool(t)
	rules, err := os.ReadFile("shardfs-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("shardfs-alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	broken := strings.Replace(string(rules), "rate(shardfs_stall_seconds_total[5m]) > 0.1", "rate(shardfs_stall_seconds_total[5m]) > 0.5", 1)
	if broken == string(rules) {
		t.Fatal("the stall rule's threshold is not where this test expects it")
	}
	os.WriteFile(dir+"/shardfs-alerts.yml", []byte(broken), 0o644)
	os.WriteFile(dir+"/shardfs-alerts_test.yml", tests, 0o644)
	cmd := exec.Command(tool, "test", "rules", "shardfs-alerts_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("a stall threshold of 50%% passed the rule tests:\n%s", out)
	}
}
