package integration

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
)

// countingSource is a reverse proxy in front of a MinIO server that
// counts, per object, the bytes its GETs of objects sent (listings not
// counted): what one part read of the source.
type countingSource struct {
	addr  string
	mu    sync.Mutex
	bytes map[string]int64
}

func startCountingSource(t *testing.T, upstream string) *countingSource {
	t.Helper()
	cs := &countingSource{bytes: map[string]int64{}}
	target, _ := url.Parse("http://" + upstream)
	proxy := httputil.NewSingleHostReverseProxy(target)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.RawQuery != "" {
			proxy.ServeHTTP(w, r)
			return
		}
		cw := &countingWriter{ResponseWriter: w}
		proxy.ServeHTTP(cw, r)
		cs.mu.Lock()
		cs.bytes[r.URL.Path] += cw.n
		cs.mu.Unlock()
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return cs
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// read is what the part read, by object name, and resets the count.
func (cs *countingSource) read() map[string]int64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := cs.bytes
	cs.bytes = map[string]int64{}
	return out
}

// Issue 59 item 2: 8 parts of an ingest of 24 WebDataset shards on MinIO
// run as concurrent processes, each reading the source through a proxy
// that counts its bytes. Each part reads only its slice of 3 shards: the
// bytes it read are its slice's, within one source shard, and nothing of
// another shard. At --shard-size 64KiB each source shard (about 220 KB)
// is larger than its share of a window, so it is read in pieces: its
// first GET's bytes are the scan's first, and no byte is read twice (at
// 128KiB every shard is read whole; with the first GET closed unread, a
// part read 1.6-1.7x its slice here). One part is SIGKILLed at once and
// run again, and reads its slice again. The commit serves every record, once, each member
// byte for byte, and verifies.
func TestSlicePartsReadOnlyTheirSliceOnMinIO(t *testing.T) {
	c := startCluster(t, 3)
	dir := t.TempDir()
	writeRecordShards(t, dir, 24, 50)
	w := readWDS(t, dir)
	// The source: a bucket of its own on the first server.
	sizes := map[string]int64{}
	src, err := backend.Open(c.servers[0].URL("shardfs/src"), backend.OpenOptions{Credentials: &backend.Credentials{
		AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	slices.Sort(shards)
	for _, p := range shards {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Put(t.Context(), filepath.Base(p), b); err != nil {
			t.Fatal(err)
		}
		sizes[filepath.Base(p)] = int64(len(b))
	}
	biggest := int64(0)
	for _, n := range sizes {
		biggest = max(biggest, n)
	}
	stores := "--stores=" + strings.Join(c.urls, ",")
	const parts = 8
	proxies := make([]*countingSource, parts)
	part := func(i int) *exec.Cmd {
		// The source through part i's proxy; the stores are read directly.
		return execShardfs("ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--strata=source", "--job=slices",
			fmt.Sprintf("--part=%d/%d", i, parts), "http://"+proxies[i].addr+"/shardfs/src", "sliced")
	}
	for i := range parts {
		u, _ := url.Parse(c.urls[0])
		proxies[i] = startCountingSource(t, u.Host)
	}
	var cmds []*exec.Cmd
	outs := make([]*strings.Builder, parts)
	for i := range parts {
		cmd := part(i)
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	const killed = 3
	time.Sleep(100 * time.Millisecond)
	cmds[killed].Process.Signal(syscall.SIGKILL)
	for i, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil && i != killed {
				t.Fatalf("part %d/%d: %v\n%s", i, parts, err, outs[i])
			}
		case <-time.After(3 * time.Minute):
			for _, c := range cmds {
				c.Process.Kill()
			}
			t.Fatalf("part %d/%d did not end within 3 minutes", i, parts)
		}
	}
	proxies[killed].read()
	if r := run(t, 3*time.Minute, nil, part(killed).Args[1:]...); r.code != 0 {
		t.Fatalf("part %d/%d run again: %v", killed, parts, r)
	}
	for i := range parts {
		var slice int64
		want := map[string]bool{}
		for _, p := range shards[i*len(shards)/parts : (i+1)*len(shards)/parts] {
			want[filepath.Base(p)] = true
			slice += sizes[filepath.Base(p)]
		}
		var read int64
		for path, n := range proxies[i].read() {
			name := filepath.Base(path)
			if !want[name] {
				t.Errorf("part %d read %d bytes of %s, which is not in its slice", i, n, path)
			}
			read += n
		}
		if read < slice || read > slice+biggest {
			t.Errorf("part %d read %d bytes; its slice holds %d (within one source shard, %d, wanted)", i, read, slice, biggest)
		}
		t.Logf("part %d: read %d bytes of its slice's %d", i, read, slice)
	}
	if r := run(t, 3*time.Minute, nil, "commit", stores, "sliced"); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d samples", w.records)) {
		t.Fatalf("commit: %v", r)
	}
	if r := run(t, 3*time.Minute, nil, "verify", stores, "sliced"); r.code != 0 {
		t.Fatalf("verify: %v", r)
	}
	mnt := mountShardfs(t, stores, "--batch-size=40", "--epochs=1", "sliced")
	seen := checkRecordEpoch(t, mnt, 0, 1, w.bytes)
	if len(seen) != w.records {
		t.Fatalf("the epoch served %d records, the source holds %d", len(seen), w.records)
	}
	for key, n := range seen {
		if n != 1 {
			t.Fatalf("record %s served %d times in an epoch", key, n)
		}
	}
}

// Issue 59: the commit of parts that read only their slice merges them in
// memory that does not grow with the records. WebDataset sources of 5,000
// and 60,000 small records (a .json each) in 24 shards are ingested in 8
// parts at once on MinIO, each committed beside two processes spinning on
// the cores: the large commit's peak RSS stays within 1.25× the small
// one's + 12 MiB.
func TestSlicePartsCommitMemoryIsFlat(t *testing.T) {
	peak := map[int]int64{}
	stores := "--stores=" + strings.Join(sharedCluster(t, 3).urls, ",")
	for _, n := range []int{5_000, 60_000} {
		dir := t.TempDir()
		const shards = 24
		sources := []string{"web", "web", "web", "books", "code"}
		for s := range shards {
			var members [][2]string
			for r := s * n / shards; r < (s+1)*n/shards; r++ {
				members = append(members, [2]string{fmt.Sprintf("%08d.json", r), fmt.Sprintf(`{"source": %q}`, sources[r%len(sources)])})
			}
			writeTar(t, filepath.Join(dir, fmt.Sprintf("shard-%04d.tar", s)), members...)
		}
		name := fmt.Sprintf("flat%d", n)
		var parts []*exec.Cmd
		var outs []*strings.Builder
		for i := range 8 {
			cmd := execShardfs("ingest", stores, "--data=2", "--parity=1", "--shard-size=64KiB", "--strata=source", fmt.Sprintf("--part=%d/8", i), "--job=flat", dir, name)
			out := &strings.Builder{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			parts, outs = append(parts, cmd), append(outs, out)
		}
		for i, cmd := range parts {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("part %d/8 of %d records: %v\n%s", i, n, err, outs[i])
				}
			case <-time.After(5 * time.Minute):
				for _, c := range parts {
					c.Process.Kill()
				}
				t.Fatalf("part %d/8 of %d records did not end within 5 minutes", i, n)
			}
		}
		stop := busyProcesses(t, 2)
		cmd := execShardfs("commit", name, stores)
		rss := measurePeakRSS(t, cmd)
		out, err := runBoundedOutput(t, cmd)
		stop()
		if err != nil || !strings.Contains(out, fmt.Sprintf("%d samples", n)) {
			t.Fatalf("commit of %d records in 8 parts: %v\n%s", n, err, out)
		}
		peak[n] = rss()
		t.Logf("commit of %d records in 8 parts: %d MiB", n, peak[n]>>20)
	}
	if bound := peak[5_000]*5/4 + 12<<20; peak[60_000] > bound {
		t.Errorf("the commit of 60,000 records peaked at %d MiB, more than 1.25× the 5,000 records' %d MiB + 12 MiB", peak[60_000]>>20, peak[5_000]>>20)
	}
}
