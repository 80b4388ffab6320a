//go:build benchharness

package bench

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/internal/miniotest"
)

// singlePassFloor is the single pass's floor ingestCPU measured, in CPU
// seconds per GB of source (MinIO's and the ingest's), 0 when it did not
// run: the scale scenario compares with it in the same run.
var singlePassFloor float64

// scaleRecordsPerShard is how many records each generated WebDataset
// shard holds.
const scaleRecordsPerShard = 10_000

// scaleIngest is issue 59's scale test: WebDataset and JSONL sources of
// 10,000 records up to 5,000,000 (SHARDFS_BENCH_SCALE, a comma-separated
// list, picks the sizes), written to disk as a stream, each ingested at
// the same --shard-size into 6 MinIO buckets RS(4,2). It reports the
// ingest's peak RSS, its wall time and the CPU seconds per GB of source
// (the ingest's and MinIO's), against the smallest size's RSS and against
// ingestcpu's single-pass floor when that ran first (SHARDFS_BENCH_ONLY=
// ingestcpu,scale). Flat memory means the largest's peak RSS within 1.15×
// the smallest's. SHARDFS_BENCH_SCALE_SHARD_SIZES (a comma-separated list,
// 4MiB unless set) runs the whole table at each --shard-size.
func scaleIngest(t *testing.T, r *report, work string) {
	srv := miniotest.Start(t, "store0", "store1", "store2", "store3", "store4", "store5")
	for _, shardSize := range strings.Split(envStr("SHARDFS_BENCH_SCALE_SHARD_SIZES", "4MiB"), ",") {
		scaleIngestAt(t, r, work, storesOn(srv), strings.TrimSpace(shardSize))
	}
}

// scaleIngestAt is scaleIngest's table at one --shard-size.
func scaleIngestAt(t *testing.T, r *report, work, stores, shardSize string) {
	var sizes []int
	for _, f := range strings.Split(envStr("SHARDFS_BENCH_SCALE", "10000,100000,1000000,5000000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("SHARDFS_BENCH_SCALE: %q is not a number of records", f)
		}
		sizes = append(sizes, n)
	}
	r.printf("## Scale: ingest memory and CPU by the number of records, at --shard-size %s (issue 59)\n\nGenerated records of a short text (`.txt`, 60–140 bytes) and a `.json` of two fields (`source`, one of 5 with a skewed mix, and `n`), as WebDataset shards of %d records and as one JSONL corpus; each ingested (`--strata source --shard-size %s`, RS(4,2), 6 MinIO buckets of one process) %d times under new names. Peak RSS and the ingest's CPU from `/usr/bin/time -v`, MinIO's from /proc; CPU seconds per GB of source file bytes.\n\n", shardSize, scaleRecordsPerShard, shardSize, reps)
	if singlePassFloor > 0 {
		r.printf("The single pass's floor (scenario ingestcpu, this run): %.1f CPU s per GB.\n\n", singlePassFloor)
	}
	r.printf("The floor is ingestcpu's sources', image-text records whose bytes are mostly payload; these records are small, so their cost is mostly per record (the last column), and a ratio to the floor compares per-byte costs of unlike sources.\n\n")
	r.printf("Default flags otherwise: a source longer than one chunk of records (a shard's bytes and 4,096 records, or 4 shards' bytes) streams, a chunk at a time (`--stream`, the chunks column); one that fits a chunk is placed whole, as before streaming existed. Flat memory shows as the peak RSS of the sizes that stream staying put: the column ÷ the previous size's.\n\n")
	r.printf("| source | records | source MB | chunks | wall s | peak RSS MB | RSS ÷ smallest's | RSS ÷ the previous size's | CPU s/GB (ingest + MinIO) | ÷ the single-pass floor | CPU µs a record |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, format := range []string{"webdataset", "jsonl"} {
		var first, prev float64
		for _, n := range sizes {
			src, bytes := writeScaleSource(t, work, format, n)
			var wall, rss, cpu, perRecord []float64
			var chunks string
			for rep := range reps {
				args := []string{"ingest", stores, "--data=4", "--parity=2", "--shard-size=" + shardSize, "--strata=source"}
				if format == "jsonl" {
					args = append(args, "--member=text=txt")
				}
				args = append(args, src, fmt.Sprintf("scale-%s-%s-%d-%d", format, strings.ToLower(shardSize), n, rep))
				before := procTimes()
				secs, mb, own, out := timeVOut(t, binary, args...)
				chunks = "1 (placed whole)"
				if m := regexp.MustCompile(`read once, in (\d+) chunks`).FindSubmatch(out); m != nil {
					chunks = string(m[1])
				}
				minio := cpuDelta(before, procTimes(), roleOf)["MinIO"]
				wall, rss, cpu = append(wall, secs), append(rss, mb), append(cpu, (own+minio)/(float64(bytes)/1e9))
				perRecord = append(perRecord, (own+minio)/float64(n)*1e6)
			}
			w, m, c := summarize(wall), summarize(rss), summarize(cpu)
			if first == 0 {
				first, prev = m.med, m.med
			}
			floor := "—"
			if singlePassFloor > 0 {
				floor = fmt.Sprintf("%.2f", c.med/singlePassFloor)
			}
			r.printf("| %s | %d | %.0f | %s | %s | %s | %.2f | %.2f | %s | %s | %s |\n", format, n, float64(bytes)/1e6, chunks, fmt1(w), m, m.med/first, m.med/prev, fmt1(c), floor, fmt1(summarize(perRecord)))
			prev = m.med
			os.RemoveAll(src)
		}
	}
	r.printf("\n")
}

// writeScaleSource writes n records as format (webdataset: a directory of
// tar shards; jsonl: one corpus file), streamed, and returns its path and
// its bytes on disk.
func writeScaleSource(t *testing.T, work, format string, n int) (string, int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 59))
	sources := []string{"web", "books", "news", "code", "forum"}
	source := func() string {
		x := rng.IntN(100)
		switch {
		case x < 50:
			return sources[0]
		case x < 75:
			return sources[1]
		case x < 88:
			return sources[2]
		case x < 96:
			return sources[3]
		}
		return sources[4]
	}
	const letters = "abcdefghijklmnopqrstuvwxyz      "
	text := func() []byte {
		b := make([]byte, 60+rng.IntN(81))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return b
	}
	var total int64
	switch format {
	case "webdataset":
		dir := filepath.Join(work, fmt.Sprintf("scale-wds-%d", n))
		os.MkdirAll(dir, 0o755)
		for s := 0; s*scaleRecordsPerShard < n; s++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%06d.tar", s)))
			if err != nil {
				t.Fatal(err)
			}
			bw := bufio.NewWriterSize(f, 1<<20)
			tw := tar.NewWriter(bw)
			for k := s * scaleRecordsPerShard; k < min(n, (s+1)*scaleRecordsPerShard); k++ {
				js, _ := json.Marshal(map[string]any{"source": source(), "n": k})
				for _, m := range []struct {
					ext  string
					body []byte
				}{{"txt", text()}, {"json", js}} {
					if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%09d.%s", k, m.ext), Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
						t.Fatal(err)
					}
					tw.Write(m.body)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			bw.Flush()
			fi, _ := f.Stat()
			total += fi.Size()
			f.Close()
		}
		return dir, total
	case "jsonl":
		p := filepath.Join(work, fmt.Sprintf("scale-%d.jsonl", n))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		enc := json.NewEncoder(bw)
		for k := range n {
			enc.Encode(map[string]any{"text": string(text()), "source": source(), "n": k})
		}
		bw.Flush()
		fi, _ := f.Stat()
		f.Close()
		return p, fi.Size()
	}
	t.Fatalf("no source format %q", format)
	return "", 0
}
