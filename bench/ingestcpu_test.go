//go:build benchharness

package bench

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// ingestCPU measures where the cores go when records are ingested from
// WebDataset shards on MinIO, beside rclone's copy of the same shards
// between two remotes of the same server (issue 41's throughput target):
// the CPU seconds per GB of source of the MinIO process and of the tool
// itself, and so the rate two cores allow at that cost. Both saturate the
// two cores, so a tool's rate follows its total CPU per GB.
func ingestCPU(t *testing.T, r *report, work string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5", "peer")
	for _, remote := range []string{"PEER", "PEER2"} {
		for k, v := range map[string]string{"TYPE": "s3", "PROVIDER": "Minio", "ENDPOINT": "http://" + srv.Addr, "ACCESS_KEY_ID": miniotest.AccessKey, "SECRET_ACCESS_KEY": miniotest.SecretKey} {
			os.Setenv("RCLONE_CONFIG_"+remote+"_"+k, v)
		}
	}
	const n = 100_000
	src := filepath.Join(work, fmt.Sprintf("ingestcpu-%d", n))
	run(t, "/usr/bin/python3", "../examples/make_webdataset.py", src, strconv.Itoa(n/500), strconv.Itoa(n), "3")
	var total int64
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
	}
	members := memberBytes(t, src)
	prefix := "src/ingestcpu"
	run(t, "rclone", "copy", "--transfers=8", src, "peer:peer/"+prefix)
	gb := float64(total) / 1e9

	type tool struct {
		name       string
		before     func()
		args       func(rep int) []string
		inProcess  func() // run in this process instead of args, its CPU taken from getrusage
		rate       []float64
		minio, own []float64
	}
	ingestFrom := func(from, name string, extra ...string) func(int) []string {
		return func(rep int) []string {
			return append(append([]string{binary, "ingest", storesOn(srv), "--data=4", "--parity=2", "--shard-size=4MiB", "--strata=source", "--bins=aesthetic=4"}, extra...),
				from, fmt.Sprintf("%s%d", name, rep))
		}
	}
	ingestArgs := func(extra ...string) func(int) []string {
		return ingestFrom("http://"+srv.Addr+"/peer/"+prefix, "cpu", extra...)
	}
	got := filepath.Join(work, "ingestcpu-got")
	moves := 0
	tools := []*tool{
		{name: "`rclone copy --transfers 8`", before: func() { run(t, "rclone", "purge", "peer2:peer/dst") },
			args: func(int) []string {
				return []string{"rclone", "copy", "--transfers=8", "peer:peer/" + prefix, "peer2:peer/dst"}
			}},
		{name: "`shardfs ingest`", args: ingestArgs()},
		{name: "`shardfs ingest --dry-run` (the scan alone)", args: ingestArgs("--dry-run")},
		// The two halves of what any ingest of these shards must ask of
		// the store, measured apart: every source byte read once, and
		// the fragments written (RS(4,2): 1.5 bytes a source byte).
		{name: "`rclone copy --transfers 8` from MinIO to a local directory (MinIO reads each source byte once)",
			before: func() { os.RemoveAll(got) },
			args: func(int) []string {
				return []string{"rclone", "copy", "--transfers=8", "peer:peer/" + prefix, got}
			}},
		{name: "`shardfs ingest` from the local shards (MinIO stores the fragments, reads nothing)", args: ingestFrom(src, "cpulocal")},
		// What shardfs's store client spends only to move the bytes a
		// single-pass ingest must move, doing nothing else.
		// What reading the tar headers and the .json members costs,
		// apart from any store: the scan of the same shards on local
		// disk (in the page cache), which writes nothing.
		{name: "`shardfs ingest --dry-run` of the local shards (the scan's parsing alone, no store)", args: ingestFrom(src, "cpuparse", "--dry-run")},
		{name: "shardfs's store client only moving the bytes a single pass must: each source shard read once (one GET, 8 at once), and the members' bytes written as RS(4,2) stripes of 1 MiB fragments (the objects of `--shard-size 4MiB`); no scan, encoding or checksums",
			inProcess: func() {
				moveBytesOnly(t, srv, prefix, fmt.Sprintf("moveonly%d", moves), float64(members)/float64(total))
				moves++
			}},
	}
	for rep := range reps {
		for _, tl := range tools {
			if tl.before != nil {
				tl.before()
			}
			before, selfBefore := procTimes(), selfCPU()
			t0 := time.Now()
			var own float64
			if tl.inProcess != nil {
				tl.inProcess()
				own = selfCPU() - selfBefore
			} else {
				args := tl.args(rep)
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v: %v\n%s", args, err, out)
				}
				own = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
			}
			tl.rate = append(tl.rate, float64(total)/1e6/time.Since(t0).Seconds())
			tl.minio = append(tl.minio, cpuDelta(before, procTimes(), roleOf)["MinIO"]/gb)
			tl.own = append(tl.own, own/gb)
		}
	}
	r.printf("## Records: where the cores go in an ingest from shards on MinIO (issue 41)\n\n%d image-text records (%.0f MB in %d WebDataset shards, `examples/make_webdataset.py`: small members, so most of a shard is tar headers and padding) on one MinIO process; `shardfs ingest` writes RS(4,2) into 6 buckets of the same process (`--strata source --bins aesthetic=4 --shard-size 4MiB`), rclone copies the shards between two remotes of it. CPU seconds per GB of source (user + system) of the MinIO process and of the tool; the tools run one after the other, repetitions interleaved.\n\n", n, float64(total)/1e6, len(entries))
	r.printf("| | MB/s | MinIO CPU s/GB | the tool's CPU s/GB | total CPU s/GB | MB/s two cores allow at this cost |\n|---|---|---|---|---|---|\n")
	for _, tl := range tools {
		var tot []float64
		for i := range tl.minio {
			tot = append(tot, tl.minio[i]+tl.own[i])
		}
		ts := summarize(tot)
		r.printf("| %s | %s | %s | %s | %s | %.0f |\n", tl.name, summarize(tl.rate), fmt1(summarize(tl.minio)), fmt1(summarize(tl.own)), fmt1(ts), 2/ts.med*1e3)
	}
	rc, sc := summarize(tools[0].rate), summarize(tools[2].rate)
	r.printf("\nratio ingest / rclone %.2f×, scan alone / rclone %.2f×. For 1.5× rclone here, an ingest's total must be at most two thirds of rclone's CPU per GB.\n\n", summarize(tools[1].rate).med/rc.med, sc.med/rc.med)
	// The store's floor: an ingest that read each source byte once and
	// spent no CPU of its own would still cost MinIO the read of the
	// source and the writes of the fragments. With both tools bound by
	// the same two cores, rclone's total over that floor bounds the ratio
	// any ingest of RS(4,2) can reach against rclone on this machine.
	var rcTotal []float64
	for i := range tools[0].minio {
		rcTotal = append(rcTotal, tools[0].minio[i]+tools[0].own[i])
	}
	read, write := summarize(tools[3].minio).med, summarize(tools[4].minio).med
	r.printf("The store's floor: MinIO spends %.1f CPU s per GB reading the source once and %.1f storing its fragments, %.1f in all, before the ingest spends any CPU of its own; rclone's copy costs %.1f in all. So an ingest that read the source once and cost nothing itself would reach at most %.2f× rclone on this machine.\n\n",
		read, write, read+write, summarize(rcTotal).med, summarize(rcTotal).med/(read+write))
	// The client's floor: the last row is a single pass that only moves
	// the bytes every single-pass ingest must move, through shardfs's
	// own store client. Its total, store included, bounds what any
	// single-pass ingest with this client reaches against rclone here;
	// one that reads the source twice (a scan, then the upload) pays the
	// read again on both sides.
	mover, parse := tools[6], tools[5]
	var moveTotal []float64
	for i := range mover.minio {
		moveTotal = append(moveTotal, mover.minio[i]+mover.own[i])
	}
	mt := summarize(moveTotal).med
	var paired []float64 // the byte mover's rate over rclone's, repetition by repetition
	for i := range mover.rate {
		paired = append(paired, mover.rate[i]/tools[0].rate[i])
	}
	pr := summarize(paired)
	r.printf("The client's floor: a pass that only moves those bytes through shardfs's store client (the last row) costs %.1f CPU s per GB in all, %.1f of it the client's own, and runs at %.2f× rclone's rate (%.2f–%.2f, repetition by repetition; %.2f× at the rates two cores allow).\n\n",
		mt, summarize(mover.own).med, pr.med, pr.lo, pr.hi, summarize(rcTotal).med/mt)
	// A single-pass ingest moves those bytes and parses the tar stream
	// it reads (the local scan's own CPU: headers, .json members, page
	// cache reads), before it encodes or checksums anything.
	pc := summarize(parse.own).med
	singlePassFloor = mt + pc
	r.printf("The single pass's floor: an ingest that read the source once must move those bytes and also parse the tar stream it reads, %.1f CPU s per GB (the scan of the local shards, no store), before it encodes or checksums anything: at least %.1f CPU s per GB in all, so at most %.2f× rclone at the rates two cores allow here, since both saturate them. 1.5× rclone needs a total of at most %.1f.\n\n",
		pc, mt+pc, summarize(rcTotal).med/(mt+pc), summarize(rcTotal).med/1.5)
}

// moveBytesOnly reads every shard under prefix of the peer bucket once,
// whole (one GET each, 8 shards at once), and writes memberShare of its
// bytes (the members, without tar headers and padding: what an ingest
// stores) as RS(4,2) stripes of 1 MiB fragments, six objects a stripe, one
// to each store bucket under to (new keys, as an ingest's are), through
// shardfs's own store client: the CPU a single-pass ingest cannot go
// below with this client, before it scans, encodes or checksums anything.
func moveBytesOnly(t *testing.T, srv *miniotest.Server, prefix, to string, memberShare float64) {
	open := func(url string) backend.Store {
		st, err := backend.Open(url, backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	src := open(srv.URL("peer/" + prefix))
	var dst []backend.Store
	for i := range 6 {
		dst = append(dst, open(srv.URL(fmt.Sprintf("store%d/%s", i, to))))
	}
	ctx := context.Background()
	keys, err := src.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	const fragment = 1 << 20
	// putStripe writes a stripe of 4 fragments as an RS(4,2) ingest
	// does: its four quarters and two more of a fragment's size, one to
	// each store at once.
	putStripe := func(n int, stripe []byte) error {
		var sg errgroup.Group
		for i := range 6 {
			q := i % 4
			part := stripe[min(q*fragment, len(stripe)):min((q+1)*fragment, len(stripe))]
			sg.Go(func() error {
				return dst[i].Put(ctx, fmt.Sprintf("%d/%d", n, i), part)
			})
		}
		return sg.Wait()
	}
	var (
		mu      sync.Mutex
		pending []byte
		stripes int
	)
	var g errgroup.Group
	g.SetLimit(8)
	for _, key := range keys {
		g.Go(func() error {
			size, err := src.Stat(ctx, key)
			if err != nil {
				return err
			}
			b := make([]byte, size)
			if err := src.ReadAt(ctx, key, b, 0); err != nil {
				return err
			}
			mu.Lock()
			pending = append(pending, b[:int64(float64(len(b))*memberShare)]...)
			var cut [][]byte
			for len(pending) >= 4*fragment {
				cut = append(cut, pending[:4*fragment:4*fragment])
				pending = pending[4*fragment:]
			}
			first := stripes
			stripes += len(cut)
			mu.Unlock()
			for k, stripe := range cut {
				if err := putStripe(first+k, stripe); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(pending) > 0 {
		if err := putStripe(stripes, pending); err != nil {
			t.Fatal(err)
		}
	}
}

// memberBytes sums the member bytes of the tar shards in dir: what an
// ingest stores, without the tar headers and padding.
func memberBytes(t *testing.T, dir string) int64 {
	shards, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	var n int64
	for _, p := range shards {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				n += h.Size
			}
		}
		f.Close()
	}
	return n
}

// selfCPU is this process's CPU seconds so far (user + system).
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func fmt1(s stat) string { return fmt.Sprintf("%.1f (%.1f–%.1f)", s.med, s.lo, s.hi) }
