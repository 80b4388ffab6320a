package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestEveryCommandTeaches: every command has examples in --help, and no
// flag's help speaks of another command (as warm's --epochs once said
// "(mount: ...)").
func TestEveryCommandTeaches(t *testing.T) {
	root := newRoot()
	n := 0
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		n++
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("shardfs %s --help has no examples", c.Name())
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			for _, other := range []string{"mount:", "warm:", "plan:", "ingest:"} {
				if strings.Contains(f.Usage, other) && other != c.Name()+":" {
					t.Errorf("shardfs %s --%s speaks of another command: %q", c.Name(), f.Name, f.Usage)
				}
			}
		})
	}
	if n < 12 {
		t.Fatalf("%d commands found, want at least the 12 shipped ones", n)
	}
}

// TestHelpConfigExampleParses: the config file shown in shardfs --help is
// one the config loader accepts, with its stores and both credentials.
func TestHelpConfigExampleParses(t *testing.T) {
	long := newRoot().Long
	start, end := strings.Index(long, "{\"stores\""), strings.LastIndex(long, "}}}")
	if start < 0 || end < start {
		t.Fatal("shardfs --help shows no config file")
	}
	name := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(name, []byte(long[start:end+3]), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := (&globals{configPath: name}).loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Stores) != 2 || c.Credentials["default"].AccessKeyID != "..." || c.Credentials["10.0.0.2:9000"].SecretAccessKey != "..." {
		t.Fatalf("the help's config parsed as %+v", c)
	}
}

// Issue 40 item 17: shardfs --version was an unknown flag. It prints the
// version command's line.
func TestVersionFlag(t *testing.T) {
	root := newRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatalf("shardfs --version: %v", err)
	}
	if got := strings.TrimSpace(out.String()); got != versionLine() {
		t.Fatalf("shardfs --version printed %q, want %q", got, versionLine())
	}
}

// Bad heal flags are refused, naming the flag, before any store is asked.
func TestHealFlagsRefused(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--pause 0", "--pause 0s"},
		{"--hint-poll 0", "--hint-poll 0s"},
		{"--lease 1s", "--lease 1s: at least 4s"},
		{"--batch 0", "--batch 0: at least 1"},
		{"--rate-bytes lots", `--rate-bytes "lots"`},
		{"--rate-requests -1", "--rate-requests -1"},
	} {
		root := newRoot()
		root.SetArgs(append(append([]string{"heal", "--stores", "file:///nonexistent/s0"}, strings.Fields(c.args)...), "ds"))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("heal %s: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}
