package main

import (
	"context"
	"os"
	"strings"
	"testing"
)

// A command given too few or too many arguments says how it is called:
// "shardfs stats" answered only "accepts 1 arg(s), received 0".
func TestArgumentErrorsShowUsage(t *testing.T) {
	checked := 0
	for _, cmd := range newRootFor(&globals{}).Commands() {
		name := cmd.Name()
		if cmd.Args == nil || cmd.Hidden || name == "help" || name == "completion" {
			continue
		}
		for _, args := range [][]string{{name}, {name, "a", "b", "c", "d"}} {
			if cmd.Args(cmd, args[1:]) == nil {
				continue // the command takes these
			}
			err := execute(context.Background(), args)
			want := "(usage: shardfs " + name + " "
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("shardfs %s: %v; want it to end with %q", strings.Join(args, " "), err, want+"...)")
			}
			checked++
		}
	}
	if checked < 15 {
		t.Fatalf("%d refusals checked: the commands were not found", checked)
	}
}

// An empty URL in the store list (a stray comma) is named as such: it was
// refused as `store URL : unknown scheme ""`.
func TestEmptyStoreURLNamed(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ stores, want string }{
		{",", "store 0 of the 2 URLs given is empty"},
		{"file://" + dir + "/a,,file://" + dir + "/b", "store 1 of the 3 URLs given is empty"},
		{"file://" + dir + "/a,", "store 1 of the 2 URLs given is empty"},
	} {
		err := execute(context.Background(), []string{"list", "--stores", c.stores})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("--stores %q: %v; want %q", c.stores, err, c.want)
		}
	}
}

// A report read from standard input ("-") is named as such in errors: it
// was "-: invalid character ...".
func TestReportFromStdinNamed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("not json")
	w.Close()
	stdin := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = stdin }()
	err = execute(context.Background(), []string{"report", "--stores", "file://" + t.TempDir() + "/s0", "--run", "r1", "--epoch", "0", "ds", "-"})
	if err == nil || !strings.HasPrefix(err.Error(), "the report on standard input: ") {
		t.Fatalf("%v; want an error that names the report on standard input", err)
	}
}
