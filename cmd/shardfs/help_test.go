package main

import (
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
