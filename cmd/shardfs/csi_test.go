package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/fs"
)

// A volume's attributes become mount arguments through the flags' own
// parsers: sorted (equal attributes, equal views), the plugin's own flags
// refused, errors that name the attribute.
func TestCSIArgs(t *testing.T) {
	attrs := map[string]string{"dataset": "train", "stores": "file:///a,file:///b,file:///c", "seed": "7", "batch-size": "16", "cache-size": "64MiB", "alpha": "0.5"}
	args, err := csiArgs(attrs)
	if err != nil {
		t.Fatal(err)
	}
	want := "--alpha=0.5 --batch-size=16 --cache-size=64MiB --seed=7 --stores=file:///a,file:///b,file:///c --allow-other train"
	if got := strings.Join(args, " "); got != want {
		t.Fatalf("args:\n got %s\nwant %s", got, want)
	}
	// Profiles on every interface: refused; on loopback: served.
	for addr, ok := range map[string]bool{"0.0.0.0:9464": false, ":9464": false, "10.0.0.5:9464": false, "127.0.0.1:9464": true, "[::1]:9464": true, "localhost:9464": true} {
		withProfiles := map[string]string{"pprof": "true", "metrics-addr": addr}
		for k, v := range attrs {
			withProfiles[k] = v
		}
		_, err := csiArgs(withProfiles)
		if ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "loopback only") {
			t.Errorf("pprof with metrics-addr %s: %v; want accepted: %v", addr, err, ok)
		}
	}
	for _, tc := range []struct {
		key, value, names string
	}{
		{"batchsize", "16", `"batchsize" is not known`},
		{"batch-size", "lots", `batch-size="lots"`},
		{"batch-size", "0", "batch-size 0"},
		{"tail", "sometimes", "tail"},
		{"cache-size", "1MiB", "cache-size"},
		{"request-timeout", "0s", "request-timeout"},
		{"log-level", "loud", "log-level"},
		{"ready-file", "/tmp/x", `"ready-file" is not known`},
		{"allow-other", "false", `"allow-other" is not known`},
		{"config", "/etc/shardfs.json", `"config" is not known`},
		{"stores", "", "stores is required"},
		{"dataset", "", "dataset is required"},
		{"mix", "a:1,b:1", "dataset and mix"},
		// Issue 55: a dataset that reads as a flag, or a bad name, is an
		// invalid attribute (it was parsed as --mix, or failed Internal).
		{"dataset", "--mix=a:1", `volume attribute dataset: dataset name "--mix=a:1"`},
		{"dataset", "bad/name", `volume attribute dataset: dataset name "bad/name"`},
		{"pprof", "true", "pprof serves profiles on metrics-addr"},
	} {
		bad := map[string]string{}
		for k, v := range attrs {
			bad[k] = v
		}
		bad[tc.key] = tc.value
		_, err := csiArgs(bad)
		if err == nil || !strings.Contains(err.Error(), tc.names) || strings.Contains(err.Error(), "--"+tc.key) {
			t.Errorf("%s=%q: %v; want an error naming %q, in attribute terms (no --flag)", tc.key, tc.value, err, tc.names)
		}
	}
}

// --fuse-max-request: a power of two from 128KiB to 16MiB, and no more
// than the kernel sends (fs.fuse.max_pages_limit), refused naming the
// sysctl; unset (a command that fills the flags itself) is 1 MiB.
func TestFuseMaxRequestFlag(t *testing.T) {
	base := mountFlags{cacheSize: "256MiB", readTimeout: time.Second}
	for _, bad := range []string{"3MiB", "64KiB", "32MiB", "big"} {
		f := base
		f.maxRequest = bad
		if _, err := checkMountFlags(&f); err == nil || !strings.Contains(err.Error(), "--fuse-max-request") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	f := base
	if sz, err := checkMountFlags(&f); err != nil || sz.maxRequest != 1<<20 {
		t.Fatalf("unset: %d %v", sz.maxRequest, err)
	}
	f.maxRequest = "16MiB"
	_, err := checkMountFlags(&f)
	if fs.KernelMaxRequest() >= 16<<20 {
		if err != nil {
			t.Fatalf("16MiB on a kernel that allows it: %v", err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "sysctl -w fs.fuse.max_pages_limit=4096") {
		t.Fatalf("16MiB on a kernel that sends at most %d: %v", fs.KernelMaxRequest(), err)
	}
}
