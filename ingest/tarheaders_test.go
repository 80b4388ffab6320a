package ingest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// scanBoth scans the shard b with plainTarHeaders and with archive/tar,
// and fails t where they differ; plain says whether plainTarHeaders read
// it (false: it declined, and readShardRecords reads it again with
// archive/tar).
func scanBoth(t *testing.T, b []byte) (plain bool, recs recordBatch, err error) {
	t.Helper()
	scan := func(tr tarHeaders) (recordBatch, error) {
		got := recordBatch{file: "s.tar"}
		err := scanShardRecords(tr, int64(len(b)), 1<<30, &got, nil)
		got.doneReading() // as readShardRecords returns it
		return got, err
	}
	fast, fastErr := scan(&plainTarHeaders{br: bufio.NewReader(bytes.NewReader(b))})
	std, stdErr := scan(newStdTarHeaders(bytes.NewReader(b)))
	if errors.Is(stdErr, errNotPlain) {
		t.Fatalf("archive/tar's scan returned errNotPlain")
	}
	if errors.Is(fastErr, errNotPlain) {
		return false, std, stdErr
	}
	if (fastErr == nil) != (stdErr == nil) || (fastErr != nil && fastErr.Error() != stdErr.Error()) {
		t.Fatalf("plain headers: error %v; archive/tar: %v", fastErr, stdErr)
	}
	if !reflect.DeepEqual(fast, std) {
		t.Fatalf("plain headers read %+v; archive/tar read %+v", fast, std)
	}
	return true, std, stdErr
}

func goTar(t testing.TB, format tar.Format, members ...[2]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		h := &tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), Typeflag: tar.TypeReg, Format: format}
		if strings.HasSuffix(m[0], "/") {
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(m[1]))
	}
	tw.Close()
	return buf.Bytes()
}

// The shards WebDataset users have are read by plainTarHeaders, and read
// exactly as archive/tar reads them: Python's tarfile in each of its
// formats, GNU tar in ustar, GNU and its default format, Go's archive/tar.
// Shards it must decline (PAX records, a GNU long name) are declined and
// read by archive/tar.
func TestPlainTarHeadersReadWhatWritersMake(t *testing.T) {
	members := [][2]string{{"000001.jpg", "jpeg bytes"}, {"000001.json", `{"source": "web"}`}, {"sub/000002.jpg", strings.Repeat("x", 1000)}, {"sub/000002.json", `{"source": "books"}`}}
	type shard struct {
		name      string
		b         []byte
		wantPlain bool
	}
	shards := []shard{
		{"Go ustar", goTar(t, tar.FormatUSTAR, members...), true},
		{"Go GNU", goTar(t, tar.FormatGNU, members...), true},
		{"Go ustar with a directory", goTar(t, tar.FormatUSTAR, append([][2]string{{"sub/", ""}}, members...)...), true},
		{"Go PAX (a PAX path record)", goTar(t, tar.FormatPAX, append(members, [2]string{strings.Repeat("k", 120) + ".txt", "long"})...), false},
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for _, m := range members {
		p := filepath.Join(src, m[0])
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(m[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("k", 120) + ".jpg"
	if err := os.WriteFile(filepath.Join(src, long), []byte("long"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{"000001.jpg", "000001.json", "sub/000002.jpg", "sub/000002.json"}
	py := `import sys, tarfile
fmt = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}[sys.argv[1]]
with tarfile.open(sys.argv[2], "w", format=fmt) as tf:
    for n in sys.argv[3:]:
        tf.add(n)
`
	for _, f := range []string{"ustar", "gnu", "pax"} {
		out := filepath.Join(dir, "py-"+f+".tar")
		cmd := exec.Command("/usr/bin/python3", append([]string{"-c", py, f, out}, names...)...)
		cmd.Dir = src
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("python3 tarfile: %v\n%s", err, b)
		}
		b, _ := os.ReadFile(out)
		shards = append(shards, shard{"Python tarfile " + f, b, true})
	}
	for _, f := range []string{"ustar", "gnu", ""} {
		out := filepath.Join(dir, "gnu-"+f+".tar")
		args := []string{"-cf", out}
		if f != "" {
			args = append(args, "--format="+f)
		}
		cmd := exec.Command("tar", append(args, names...)...)
		cmd.Dir = src
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, b)
		}
		b, _ := os.ReadFile(out)
		shards = append(shards, shard{"GNU tar --format=" + f, b, true})
	}
	out := filepath.Join(dir, "gnu-long.tar")
	cmd := exec.Command("tar", "-cf", out, "--format=gnu", "000001.jpg", long)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	b, _ := os.ReadFile(out)
	shards = append(shards, shard{"GNU tar, a long name", b, false})

	for _, sh := range shards {
		plain, recs, err := scanBoth(t, sh.b)
		if err != nil {
			t.Errorf("%s: %v", sh.name, err)
			continue
		}
		if plain != sh.wantPlain {
			t.Errorf("%s: read by plainTarHeaders %v, want %v", sh.name, plain, sh.wantPlain)
		}
		if len(recs.records) < 2 {
			t.Errorf("%s: %d records, want at least 2", sh.name, len(recs.records))
		}
		// And through readShardRecords, which falls back where plain declines.
		if got, err := readShardRecords("s.tar", bytes.NewReader(sh.b), int64(len(sh.b)), 1<<30); err != nil || !reflect.DeepEqual(got, recs) {
			t.Errorf("%s: readShardRecords: %v, %d records, want %d", sh.name, err, len(got.records), len(recs.records))
		}
	}
}

// FuzzPlainTarHeaders holds plainTarHeaders to archive/tar: on any input
// it reads (does not decline), the records and the error are archive/tar's
// exactly.
func FuzzPlainTarHeaders(f *testing.F) {
	members := [][2]string{{"000001.jpg", "jpeg"}, {"000001.json", `{"source": "web"}`}, {"a/000002.jpg", "x"}, {"a/000002.json", `{"source": "books"}`}}
	for _, format := range []tar.Format{tar.FormatUSTAR, tar.FormatGNU, tar.FormatPAX} {
		b := goTar(f, format, members...)
		f.Add(b)
		f.Add(b[:len(b)-1024]) // no end blocks
		f.Add(b[:len(b)-512])  // one end block
	}
	f.Add(goTar(f, tar.FormatUSTAR, [2]string{"a/", ""}, [2]string{"a/1.txt", "t"}))
	// PAX records of a fractional mtime, as Python's tarfile writes them.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		tw.WriteHeader(&tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), ModTime: time.Unix(1700000000, 123456789), Format: tar.FormatPAX})
		tw.Write([]byte(m[1]))
	}
	tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		scanBoth(t, b)
	})
}

// headerSums is archive/tar's checksum arithmetic, eight bytes at a time:
// it equals the byte-by-byte sums on random blocks and the extreme ones.
func TestHeaderSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	blocks := []*[512]byte{new([512]byte), new([512]byte)}
	for i := range blocks[1] {
		blocks[1][i] = 0xff
	}
	for range 2000 {
		b := new([512]byte)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		blocks = append(blocks, b)
	}
	for _, b := range blocks {
		var unsigned, signed int64
		for i, c := range b {
			if 148 <= i && i < 156 {
				c = ' '
			}
			unsigned += int64(c)
			signed += int64(int8(c))
		}
		if u, s := headerSums(b); u != unsigned || s != signed {
			t.Fatalf("headerSums = %d, %d; byte by byte %d, %d", u, s, unsigned, signed)
		}
	}
}
