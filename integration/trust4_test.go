package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 55 item 5: a 1 GiB JSONL line under --max-record-size 1MiB was
// refused only after 5.2 GB of RSS: the line was read and decoded whole
// first. It is now refused as it is read: the ingest's peak RSS stays
// under 2 × the bound + 256 MiB, with both cores busy, and the error names
// the file, the line and the flag.
func TestHugeJSONLLineIsRefusedWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	f, err := os.Create(corpus)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 4<<20)
	fmt.Fprintln(w, `{"id": "a", "text": "short", "source": "s"}`)
	fmt.Fprint(w, `{"id": "b", "source": "s", "text": "`)
	chunk := bytes.Repeat([]byte("z"), 4<<20)
	for range 256 { // 1 GiB
		w.Write(chunk)
	}
	fmt.Fprintln(w, `"}`)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer os.Remove(corpus)
	var stores []string
	for i := range 3 {
		stores = append(stores, "file://"+filepath.Join(dir, fmt.Sprint("s", i)))
	}
	stop := busyProcesses(t, 2)
	defer stop()
	cmd := exec.Command(binary, "ingest", "--stores="+strings.Join(stores, ","), "--data=2", "--parity=1",
		"--member=text=txt", "--strata=source", "--max-record-size=1MiB", corpus, "huge")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("ingest of a 1 GiB line did not end in 5 minutes")
	}
	stop()
	if err == nil || !strings.Contains(stderr.String(), corpus+" line 2: longer than") || !strings.Contains(stderr.String(), "--max-record-size") {
		t.Fatalf("ingest of a 1 GiB line under --max-record-size 1MiB: %v\n%s\nwant it refused, naming the file, line 2 and the flag", err, stderr.String())
	}
	rssKiB := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
	if bound := int64(2*1<<20+256<<20) / 1024; rssKiB > bound {
		t.Fatalf("peak RSS %d KiB refusing a 1 GiB line, more than 2 × the 1 MiB bound + 256 MiB (%d KiB)", rssKiB, bound)
	}
	t.Logf("refused a 1 GiB line at a peak RSS of %d MiB (bound %d MiB)", rssKiB/1024, 2+256)
}
