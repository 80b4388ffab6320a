package integration

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deleteWith runs shardfs delete with stdin.
func deleteWith(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := execShardfs(append([]string{"delete"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("shardfs delete %v did not end in 2 minutes", args)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode(), elapsed: time.Since(start)}
}

// Issue 59 item 4: no command deleted a dataset. shardfs delete NAME
// refuses while a mount holds a lease on it, asks for the name again (or
// --yes), and deletes every object of that dataset and nothing of another.
func TestDeleteDataset(t *testing.T) {
	c := sharedCluster(t, 3)
	stores := "--stores=" + strings.Join(c.urls, ",")
	clients := c.clients(t)
	keepSrc := taggedSource(t, 60, 3, "", 1)
	goneSrc := taggedSource(t, 40, 2, "g", 2)
	for _, d := range [][2]string{{keepSrc, "keep"}, {goneSrc, "gone"}, {goneSrc, "gone.v2"}} {
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", "--shard-size=128KiB", d[0], d[1]); r.code != 0 {
			t.Fatalf("ingest %s: %v", d[1], r)
		}
	}
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--append", keepSrc, "gone", "--skip-existing"); r.code != 0 {
		t.Fatalf("append: %v", r)
	}
	keep, others := storeSums(t, clients, "keep"), storeSums(t, clients, "gone.v2")
	gone := storeSums(t, clients, "gone")
	unchanged := func(what string) {
		t.Helper()
		if now := storeSums(t, clients, "keep"); !maps.Equal(now, keep) {
			t.Fatalf("%s: dataset keep's objects changed", what)
		}
		if now := storeSums(t, clients, "gone.v2"); !maps.Equal(now, others) {
			t.Fatalf("%s: dataset gone.v2's objects changed (its name starts with gone's)", what)
		}
	}

	before := gone
	mp := mountShardfsEnv(t, nil, stores, "--batch-size=8", "gone")
	withLease := storeSums(t, clients, "gone") // the mount's lease is an object of the dataset
	r := deleteWith(t, "", stores, "gone", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "it is mounted: a mount on") || !strings.Contains(r.stderr, "nothing was deleted") {
		t.Fatalf("delete of a mounted dataset: %v", r)
	}
	if now := storeSums(t, clients, "gone"); !maps.Equal(now, withLease) {
		t.Fatal("a refused delete changed the dataset's objects")
	}
	mp.cmd.Process.Signal(syscall.SIGTERM)
	<-mp.exited
	gone = storeSums(t, clients, "gone")
	if !maps.Equal(gone, before) {
		t.Fatal("the mount left objects of its own behind")
	}

	for _, c := range []struct{ stdin, why string }{
		{"wrong\n", `the name typed, "wrong", is not "gone" (nothing was deleted)`},
		{"gone.v2\n", `is not "gone"`},
		{"", "no name was typed (stdin ended) (nothing was deleted)"},
	} {
		r := deleteWith(t, c.stdin, stores, "gone")
		if r.code == 0 || !strings.Contains(r.stderr, c.why) || !strings.Contains(r.stdout, "gone: version 2 of 2 versions") {
			t.Fatalf("delete, %q typed: %v\nwant %q", c.stdin, r, c.why)
		}
		if now := storeSums(t, clients, "gone"); !maps.Equal(now, gone) {
			t.Fatalf("delete, %q typed, changed the dataset's objects", c.stdin)
		}
	}
	r = deleteWith(t, "gone\n", stores, "gone")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("deleted gone: %d objects from 3 stores", len(gone))) {
		t.Fatalf("delete: %v\nwant the %d objects the stores held", r, len(gone))
	}
	if now := storeSums(t, clients, "gone"); len(now) != 0 {
		t.Fatalf("after delete, the stores hold %d objects of gone: %v", len(now), now)
	}
	unchanged("after delete")
	if r := run(t, time.Minute, nil, "list", stores); r.code != 0 || strings.Contains(r.stdout, "gone ") || !strings.Contains(r.stdout, "keep ") {
		t.Fatalf("list after delete: %v", r)
	}
	if r := run(t, 2*time.Minute, nil, "verify", stores, "keep"); r.code != 0 {
		t.Fatalf("verify keep: %v", r)
	}
	// Again: nothing of it is left to delete.
	if r := deleteWith(t, "", stores, "gone", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "no store holds an object of it") {
		t.Fatalf("a second delete: %v", r)
	}
	// The name is free, and a new dataset of it is whole.
	if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=2", "--parity=1", keepSrc, "gone"); r.code != 0 {
		t.Fatalf("ingest after delete: %v", r)
	}
	checkSamplesView(t, mountShardfs(t, stores, "--batch-size=8", "gone"), keepSrc)
	unchanged("at the end")
}

// A delete meets random store failures (cut, slowed, refused, hung) and
// random kills, on six MinIO stores RS(4,2) behind toxiproxy. After each
// run, with the stores healed, the dataset is either whole (verify, then
// repair if needed, comes back clean, and a mount serves every sample byte
// for byte) or unmountable, with no manifest on any store; and a second
// delete removes every object of it. Another dataset on the same stores
// keeps every object, byte for byte, throughout.
func TestDeleteUnderFaults(t *testing.T) {
	runs := soakCount(30, 6, 3)
	pc := startProxiedCluster(t, 6)
	stores := "--stores=" + strings.Join(pc.urls, ",")
	clients := pc.clients(t)
	src := taggedSource(t, 40, 3, "", 4)
	ingest := func(name string) {
		t.Helper()
		if r := run(t, 2*time.Minute, nil, "ingest", stores, "--data=4", "--parity=2", "--shard-size=64KiB", src, name); r.code != 0 {
			t.Fatalf("ingest %s: %v", name, r)
		}
	}
	ingest("bystander")
	bystander := storeSums(t, clients, "bystander")
	ingest("timing")
	full := deleteWith(t, "", stores, "timing", "--yes")
	if full.code != 0 {
		t.Fatalf("a delete without faults: %v", full)
	}
	rng := rand.New(rand.NewPCG(59, 4))
	outcomes := map[string]int{}
	for i := range runs {
		name := fmt.Sprintf("del%02d", i)
		ingest(name)
		fault := pickCommitFault(rng, full.elapsed)
		ended := runUnderFault(t, pc, fault, "delete", stores, name, "--yes", "--request-timeout=2s")
		healAll(t, pc.proxies)

		r := run(t, time.Minute, nil, "list", stores)
		switch {
		case r.code != 0:
			t.Fatalf("run %d (%s, delete ended %s): list: %v", i, fault, ended, r)
		case strings.Contains(r.stdout, name+" "):
			outcomes["whole"]++
			v := run(t, 2*time.Minute, nil, "verify", stores, name)
			if v.code == 1 {
				outcomes["whole, repaired"]++
				if rr := run(t, 2*time.Minute, nil, "repair", stores, name); rr.code != 0 {
					t.Fatalf("run %d (%s, delete ended %s): repair: %v", i, fault, ended, rr)
				}
				v = run(t, 2*time.Minute, nil, "verify", stores, name)
			}
			if v.code != 0 {
				t.Fatalf("run %d (%s, delete ended %s): the dataset is listed, but verify: %v", i, fault, ended, v)
			}
			mp := mountShardfsEnv(t, nil, stores, "--batch-size=8", name)
			checkSamplesView(t, mp.dir, src)
			mp.cmd.Process.Signal(syscall.SIGTERM)
			<-mp.exited
		default:
			outcomes["unmountable"]++
			if r := run(t, time.Minute, nil, "versions", stores, name); r.code == 0 {
				t.Fatalf("run %d (%s, delete ended %s): not listed, yet its versions are read: %v", i, fault, ended, r)
			}
		}
		if r := deleteWith(t, "", stores, name, "--yes"); r.code != 0 && !strings.Contains(r.stderr, "no store holds an object of it") {
			t.Fatalf("run %d (%s, delete ended %s): a second delete: %v", i, fault, ended, r)
		}
		if left := storeSums(t, clients, name); len(left) != 0 {
			t.Fatalf("run %d (%s, delete ended %s): after a second delete, %d objects of %s remain: %v", i, fault, ended, len(left), name, left)
		}
		if now := storeSums(t, clients, "bystander"); !maps.Equal(now, bystander) {
			t.Fatalf("run %d (%s, delete ended %s): the other dataset's objects changed", i, fault, ended)
		}
		outcomes[fault.kind]++
	}
	checkSamplesView(t, mountShardfs(t, stores, "--batch-size=8", "bystander"), src)
	t.Logf("%d runs (a delete without faults: %v): %v", runs, full.elapsed.Round(time.Millisecond), outcomes)
}
