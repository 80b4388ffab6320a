package ingest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// recordsBack checks that dataset name on stores holds exactly the
// records of want, each member byte for byte, split by its record table.
func recordsBack(t *testing.T, stores []backend.Store, name string, want map[string]map[string][]byte) *repository.Dataset {
	t.Helper()
	ctx := context.Background()
	ds, err := repository.Open(ctx, stores, name, repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := ds.Manifest
	if m.Samples.Len() != len(want) {
		t.Fatalf("%s holds %d records, want %d", name, m.Samples.Len(), len(want))
	}
	for i := 0; i < m.Samples.Len(); i++ {
		got, err := ds.ReadSample(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		members, ok := want[m.Samples.Key(i)]
		if !ok {
			t.Fatalf("%s holds key %q, which the source has not", name, m.Samples.Key(i))
		}
		seen := 0
		manifest.RecordMembers(m.Samples.Record(i), func(member int, size int64) {
			body, ok := members[m.Members[member]]
			if !ok || int64(len(body)) != size || !bytes.Equal(got[:size], body) {
				t.Fatalf("%s: record %s: member %s differs from the source's", name, m.Samples.Key(i), m.Members[member])
			}
			got = got[size:]
			seen++
		})
		if seen != len(members) || len(got) != 0 {
			t.Fatalf("%s: record %s: %d members and %d bytes left, the source has %d members", name, m.Samples.Key(i), seen, len(got), len(members))
		}
	}
	return ds
}

// datasetObjects lists what the stores hold of dataset name, but its lock.
func datasetObjects(t *testing.T, stores []backend.Store, name string) []string {
	t.Helper()
	var out []string
	for _, s := range stores {
		keys, err := s.List(context.Background(), name+"/")
		if err != nil && !errors.Is(err, backend.ErrNotExist) {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k != repository.LockKey(name) {
				out = append(out, s.String()+" "+k)
			}
		}
	}
	return out
}

// A streaming ingest of WebDataset shards, many chunks long (a chunk of
// 64 KiB of records, 24 of 120 KiB), serves every member byte for byte,
// its shards full but for the stream's last and those a window ends, and
// its strata counted as a whole scan counts them.
func TestStreamServesEveryRecord(t *testing.T) {
	for _, format := range []int{2, 3} {
		t.Run(fmt.Sprint("format", format), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			want := writeShards(t, dir, 24, 40)
			o := ScanOptions{Strata: []string{"source"}}
			st, err := OpenStream(dir, o)
			if err != nil || st == nil {
				t.Fatalf("OpenStream: %v", err)
			}
			defer st.Close()
			stores := localStores(t, t.TempDir(), 3)
			opts := Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 16 << 10, Seed: 5, BlockSize: 4096, Format: format}
			var done []int // ChunkDone's calls (the command's memory ceiling)
			opts.ChunkDone = func(chunk int) { done = append(done, chunk) }
			res, err := RunStream(ctx, st, opts)
			if err != nil {
				t.Fatal(err)
			}
			if st.chunks < 10 {
				t.Fatalf("%d chunks: the test wants many", st.chunks)
			}
			for i := range max(len(done), st.chunks) {
				if i >= len(done) || done[i] != i || len(done) != st.chunks {
					t.Fatalf("ChunkDone called with %v for %d chunks, want each chunk's number in order", done, st.chunks)
				}
			}
			if res.Samples != len(want) {
				t.Fatalf("%d samples committed, want %d", res.Samples, len(want))
			}
			ds := recordsBack(t, stores, "ds", want)
			whole, err := ScanWith(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			strata, _ := whole.strata()
			for _, s := range strata {
				counts[s.Name] = s.Count
			}
			for _, s := range ds.Manifest.Strata {
				if counts[s.Name] != s.Count {
					t.Errorf("stratum %s: %d samples, a whole scan counts %d", s.Name, s.Count, counts[s.Name])
				}
				delete(counts, s.Name)
			}
			if len(counts) > 0 {
				t.Errorf("strata missing: %v", counts)
			}
			var bytes int64
			for si := range ds.Manifest.Shards {
				bytes += ds.Manifest.Shards[si].Size
			}
			// Each window (64 KiB of records) may end in a part-full
			// shard; a chunk's end, carried over, does not add one.
			if full := bytes / opts.ShardSize; int64(len(ds.Manifest.Shards)) > 2*full+2 {
				t.Errorf("%d shards for %d bytes of %d-byte shards", len(ds.Manifest.Shards), bytes, opts.ShardSize)
			}
		})
	}
}

// A JSONL corpus streamed in chunks serves every record, its text member
// byte for byte and its .json the fields left.
func TestStreamJSONLCorpus(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var lines strings.Builder
	want := map[string]map[string][]byte{}
	for i := 0; i < 3000; i++ {
		text := strings.Repeat(fmt.Sprintf("doc %d ", i), 1+i%40)
		src := []string{"web", "books", "code"}[i%3]
		fmt.Fprintf(&lines, "{\"id\": \"d%05d\", \"text\": %q, \"source\": %q}\n", i, text, src)
		want[fmt.Sprintf("d%05d", i)] = map[string][]byte{"txt": []byte(text), "json": []byte(fmt.Sprintf(`{"id":"d%05d","source":%q}`, i, src))}
		if i == 1000 || i == 2500 {
			// Records larger than madeRecord, made again from their line.
			text := strings.Repeat(`long \u00e9 `, madeRecord/8) // é, escaped
			fmt.Fprintf(&lines, "{\"id\": \"big%d\", \"text\": \"%s\", \"source\": \"web\"}\n", i, text)
			want[fmt.Sprintf("big%d", i)] = map[string][]byte{"txt": []byte(strings.Repeat("long é ", madeRecord/8)), "json": []byte(fmt.Sprintf(`{"id":"big%d","source":"web"}`, i))}
		}
	}
	corpus := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(corpus, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	o := ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}, KeyField: "id"}
	st, err := OpenStream(corpus, o)
	if err != nil || st == nil {
		t.Fatalf("OpenStream: %v", err)
	}
	defer st.Close()
	stores := localStores(t, t.TempDir(), 3)
	before := recordsMadeAgain.Load()
	if _, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 8 << 10, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if st.chunks < 5 {
		t.Fatalf("%d chunks: the test wants many", st.chunks)
	}
	// The upload takes each record's bytes as the scan made them, but
	// the two over madeRecord, which it makes again from their lines.
	if again := recordsMadeAgain.Load() - before; again != 2 {
		t.Errorf("the upload made %d records again from their lines, want 2 (those over %d bytes)", again, madeRecord)
	}
	recordsBack(t, stores, "ds", want)
}

// writeTar writes records (key -> member -> bytes, members in the order
// given by names) as one tar shard.
func writeTar(t *testing.T, path string, keys []string, names []string, members map[string]map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, k := range keys {
		for _, n := range names {
			b, ok := members[k][n]
			if !ok {
				continue
			}
			if err := tw.WriteHeader(&tar.Header{Name: k + "." + n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			tw.Write(b)
		}
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A streaming ingest refused part way, after chunks were uploaded, names
// the records at fault and leaves the stores as it found them: two
// records with one key in shards far apart (found at the end, by the
// merge of the keys' runs), and a record whose fields the first chunk's
// records lack.
func TestStreamRefusalLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		last   func(members map[string]map[string][]byte) []string // the last shard's keys
		refuse []string
	}{
		{"duplicate key", func(members map[string]map[string][]byte) []string {
			members["000003"] = map[string][]byte{"bin": []byte("again"), "json": []byte(`{"source": "web"}`)}
			return []string{"000003"}
		}, []string{`key "000003" again`, "shard-0000.tar", "shard-9999.tar"}},
		{"new field", func(members map[string]map[string][]byte) []string {
			members["late"] = map[string][]byte{"bin": []byte("x"), "json": []byte(`{"source": "web", "lang": "en"}`)}
			return []string{"late"}
		}, []string{`the field "lang"`, "same fields"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			writeShards(t, dir, 12, 40)
			members := map[string]map[string][]byte{}
			keys := tc.last(members)
			writeTar(t, filepath.Join(dir, "shard-9999.tar"), keys, []string{"bin", "json"}, members)
			st, err := OpenStream(dir, ScanOptions{Strata: []string{"source"}})
			if err != nil || st == nil {
				t.Fatal(err)
			}
			defer st.Close()
			stores := localStores(t, t.TempDir(), 3)
			_, err = RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 16 << 10, BlockSize: 4096})
			if err == nil {
				t.Fatal("committed")
			}
			for _, w := range tc.refuse {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			if st.chunks < 5 {
				t.Errorf("refused after %d chunks: the test wants the refusal after uploads", st.chunks)
			}
			if left := datasetObjects(t, stores, "ds"); len(left) > 0 {
				t.Errorf("the refused ingest left %d objects, e.g. %v", len(left), left[:min(3, len(left))])
			}
		})
	}
}

// A streamed dataset (its strata numbered as they first appeared, format
// 2) grows by an append of records, with a new stratum and new records,
// and serves both versions' records byte for byte.
func TestStreamedDatasetGrows(t *testing.T) {
	ctx := context.Background()
	dir, more := t.TempDir(), t.TempDir()
	want := writeShards(t, dir, 12, 40)
	members := map[string]map[string][]byte{}
	var keys []string
	for i := range 30 {
		k := fmt.Sprintf("new%03d", i)
		src := []string{"web", "news"}[i%2] // news: a stratum the streamed records lack
		members[k] = map[string][]byte{"bin": []byte(strings.Repeat(k, 50)), "json": []byte(fmt.Sprintf(`{"source": %q}`, src))}
		keys = append(keys, k)
	}
	writeTar(t, filepath.Join(more, "more.tar"), keys, []string{"bin", "json"}, members)
	o := ScanOptions{Strata: []string{"source"}}
	st, err := OpenStream(dir, o)
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	stores := localStores(t, t.TempDir(), 3)
	if _, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 16 << 10, BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	src2, err := ScanWith(more, o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Append(ctx, src2, Options{Name: "ds", Stores: stores, ShardSize: 16 << 10}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 2 || res.Samples != 30 {
		t.Fatalf("append: version %d, %d samples", res.Version, res.Samples)
	}
	for k, m := range members {
		want[k] = m
	}
	ds := recordsBack(t, stores, "ds", want)
	names := map[string]bool{}
	for _, s := range ds.Manifest.Strata {
		names[s.Name] = true
	}
	if !names["news"] || !names["web"] || len(names) != 4 {
		t.Fatalf("strata after the append: %v", ds.Manifest.Strata)
	}
}

// A chunk of only records carried from the chunk before (a stream that
// ended just where a chunk was full, and its last shard part full) takes
// the first chunk's label fields and strata, and plans into a manifest
// that validates: it failed with "stratum has 1 labels, 0 label fields".
func TestStreamChunkOfCarriedRecordsOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeShards(t, dir, 4, 40)
	st, err := OpenStream(dir, ScanOptions{Strata: []string{"source"}})
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.shardSize = 16 << 10
	first, err := st.chunk(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		s, err := st.chunk(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			break
		}
	}
	carried, err := st.chunk(ctx, slices.Clone(first.Items[:5]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(carried.LabelFields, first.LabelFields) || !slices.Equal(carried.StrataOnly, first.StrataOnly) || len(carried.Items) != 5 {
		t.Fatalf("a chunk of carried records: label fields %v, strata %v, %d items; the first chunk's: %v, %v", carried.LabelFields, carried.StrataOnly, len(carried.Items), first.LabelFields, first.StrataOnly)
	}
	var strata streamStrata
	m, _, err := plan(carried, Options{Name: "ds", Data: 2, Parity: 1, BlockSize: 4096, ShardSize: 16 << 10, Format: 2, strataOf: strata.of}, "x")
	if err != nil {
		t.Fatal(err)
	}
	m.Stores = []string{"a", "b", "c"}
	for si := range m.Shards {
		m.Shards[si].Sums = make([]uint32, 3*m.Blocks(si))
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

// --bins N in a streaming ingest: the first chunk's quantiles cut every
// chunk, and the outer bins take what lies beyond them, their edges
// widened to the least and greatest value at the commit. Here the score
// grows with the record, so every later chunk lies above the first's
// range. Every record's stratum is the bin its score falls in under the
// committed edges.
func TestStreamBinsFromTheFirstChunk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	scores := map[string]float64{}
	for s := range 8 {
		var keys []string
		members := map[string]map[string][]byte{}
		for r := range 60 {
			k := fmt.Sprintf("%04d", s*60+r)
			scores[k] = float64(s*60+r) / 10
			members[k] = map[string][]byte{"bin": bytes.Repeat([]byte{byte(r)}, 900), "json": []byte(fmt.Sprintf(`{"source": "web", "score": %v}`, scores[k]))}
			keys = append(keys, k)
		}
		writeTar(t, filepath.Join(dir, fmt.Sprintf("s%02d.tar", s)), keys, []string{"bin", "json"}, members)
	}
	o := ScanOptions{Strata: []string{"source"}, Bins: []Bins{{Field: "score", Count: 4}}}
	st, err := OpenStream(dir, o)
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	stores := localStores(t, t.TempDir(), 3)
	res, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 16 << 10, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks < 4 || !slices.Equal(res.SampledBins, []string{"score"}) {
		t.Fatalf("%d chunks, bins from a sample %v", res.Chunks, res.SampledBins)
	}
	ds, err := repository.Open(ctx, stores, "ds", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := ds.Manifest
	edges := m.Derived[0].Edges
	if edges[0] != 0 || edges[len(edges)-1] != 47.9 || len(edges) != 5 {
		t.Fatalf("edges %v: want 5, from 0 to 47.9", edges)
	}
	col := slices.Index(m.LabelFields, "score")
	for i := 0; i < m.Samples.Len(); i++ {
		x := scores[m.Samples.Key(i)]
		if got, want := m.Strata[m.Samples.Stratum[i]].Labels[col], manifest.BinLabel(edges, max(0, binOf(edges, x))); got != want {
			t.Fatalf("record %s, score %v: in bin %s, the committed edges %v put it in %s", m.Samples.Key(i), x, got, edges, want)
		}
	}
}

// A streaming ingest from a store reads each source shard within its
// share of a window once, whole, and takes its records' bytes for the
// upload from that read: one read of each source byte (the scan and the
// upload each read it before), and one request for it, its size with it
// (a HEAD came first before: 200 of an ingest of 200 shards, about 3% of
// MinIO's CPU there). Every record comes back byte for byte.
func TestStreamReadsKeptShardsOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := writeShards(t, dir, 24, 40)
	raw, err := backend.Open("file://"+dir, backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := &countingStore{Store: raw, reads: map[string][][2]int64{}}
	st, err := OpenStoreStream(ctx, ScanOptions{Store: src, Strata: []string{"source"}})
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	stores := localStores(t, t.TempDir(), 3)
	// Windows of 512 KiB, each shard's share 256 KiB (2 read at once):
	// the source shards, about 100 KiB, are kept.
	res, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 128 << 10, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks < 4 {
		t.Fatalf("%d chunks: the test wants several", res.Chunks)
	}
	if len(src.reads) != 24 || src.stats != 0 {
		t.Fatalf("%d source shards read, with %d Stat calls; want 24, and none", len(src.reads), src.stats)
	}
	for key, reads := range src.reads {
		size, err := raw.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(reads) != 1 || reads[0] != [2]int64{0, size} {
			t.Errorf("%s (%d bytes) read as %v: want one read of it whole", key, size, reads)
		}
	}
	recordsBack(t, stores, "ds", want)
}

// OpenStream streams records (WebDataset shards, a JSONL corpus) and
// nothing else: a tree, a listing, a JSONL listing without --member and
// shards given --member (which the scan refuses, naming it) are read
// whole, and OpenStream says so with no stream and no error.
func TestOpenStreamTakesRecordsOnly(t *testing.T) {
	dir := t.TempDir()
	shards := filepath.Join(dir, "shards")
	os.MkdirAll(shards, 0o755)
	writeShards(t, shards, 1, 3)
	tree := filepath.Join(dir, "tree", "cat")
	os.MkdirAll(tree, 0o755)
	os.WriteFile(filepath.Join(tree, "a.bin"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(dir, "list.csv"), []byte("path,label\ntree/cat/a.bin,cat\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "docs.jsonl"), []byte(`{"text": "a", "source": "web"}`+"\n"), 0o644)
	member := []MemberField{{"text", "txt"}}
	for _, tc := range []struct {
		src    string
		o      ScanOptions
		stream bool
	}{
		{shards, ScanOptions{Strata: []string{"source"}}, true},
		{filepath.Join(dir, "docs.jsonl"), ScanOptions{Strata: []string{"source"}, Members: member}, true},
		{filepath.Join(dir, "tree"), ScanOptions{}, false},
		{filepath.Join(dir, "list.csv"), ScanOptions{}, false},
		{filepath.Join(dir, "docs.jsonl"), ScanOptions{}, false},
		{shards, ScanOptions{Strata: []string{"source"}, Members: member}, false},
	} {
		st, err := OpenStream(tc.src, tc.o)
		if err != nil || (st != nil) != tc.stream {
			t.Errorf("OpenStream(%s, members %v): stream %v, %v; want a stream: %v", tc.src, tc.o.Members, st != nil, err, tc.stream)
		}
		if st != nil {
			st.Close()
		}
	}
}

// PlanStream says what RunStream writes: the same samples, bytes, shards,
// stored bytes, chunks and strata (names and counts, --bins edges
// widened), reading only the source; and it refuses a key given twice as
// the ingest does.
func TestPlanStreamSaysWhatRunStreamWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeShards(t, dir, 12, 40)
	o := ScanOptions{Strata: []string{"source"}}
	opts := Options{Name: "ds", Data: 2, Parity: 1, ShardSize: 16 << 10, BlockSize: 4096}
	st, err := OpenStream(dir, o)
	if err != nil || st == nil {
		t.Fatal(err)
	}
	d, err := PlanStream(ctx, st, opts)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, err = OpenStream(dir, o)
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	opts.Stores = localStores(t, t.TempDir(), 3)
	res, err := RunStream(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if d.Samples != res.Samples || d.Bytes != res.Bytes || d.StoredBytes != res.StoredBytes || d.Shards != len(m.Shards) || d.Chunks != res.Chunks || d.Chunks < 5 {
		t.Fatalf("dry run: %d samples, %d bytes, %d stored, %d shards, %d chunks; the ingest: %d, %d, %d, %d, %d", d.Samples, d.Bytes, d.StoredBytes, d.Shards, d.Chunks, res.Samples, res.Bytes, res.StoredBytes, len(m.Shards), res.Chunks)
	}
	if fmt.Sprint(d.Strata) != fmt.Sprint(m.Strata) {
		t.Fatalf("dry run strata %v, the ingest's %v", d.Strata, m.Strata)
	}
	members := map[string]map[string][]byte{"000003": {"bin": []byte("again"), "json": []byte(`{"source": "web"}`)}}
	writeTar(t, filepath.Join(dir, "shard-9999.tar"), []string{"000003"}, []string{"bin", "json"}, members)
	st2, err := OpenStream(dir, o)
	if err != nil || st2 == nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if _, err := PlanStream(ctx, st2, opts); err == nil || !strings.Contains(err.Error(), `key "000003" again`) {
		t.Fatalf("a dry run of a key given twice: %v", err)
	}
}

// A streamed ingest holds one chunk: once a chunk is planned and uploaded,
// nothing keeps it, the first chunk included (it stayed live through
// every chunk after it, 17 MB more peak heap in an ingest of 1,000,000
// short documents at --shard-size 4MiB). Each chunk's Source is watched
// by a finalizer; by the third chunk after it, it has been collected.
func TestStreamHoldsNoChunkItUploaded(t *testing.T) {
	ctx := context.Background()
	corpus, _ := jsonlCorpus(t, t.TempDir(), 3000)
	st, err := OpenStream(corpus, ScanOptions{Strata: []string{"source"}, Members: []MemberField{{"text", "txt"}}, KeyField: "id"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	opts := Options{ShardSize: 16 << 10, BlockSize: 4096, Data: 2, Parity: 1, Seed: 5, Format: 2}
	first, whole, err := st.firstChunk(ctx, opts)
	if err != nil || whole {
		t.Fatalf("the first chunk: whole %v, %v", whole, err)
	}
	var freed []*atomic.Bool
	watch := func(src *Source) {
		f := new(atomic.Bool)
		freed = append(freed, f)
		runtime.SetFinalizer(src, func(*Source) { f.Store(true) })
	}
	watch(first)
	var strata streamStrata
	chunks := 0
	err = eachChunk(ctx, st, first, opts, "test", &strata, func(src *Source, m *manifest.Manifest, windows []int, copts Options) error {
		if chunks > 0 {
			watch(src)
		}
		chunks++
		if old := len(freed) - 4; old >= 0 {
			for range 100 {
				if freed[old].Load() {
					break
				}
				runtime.GC()
				time.Sleep(time.Millisecond)
			}
			if !freed[old].Load() {
				return fmt.Errorf("chunk %d is still held at chunk %d", old, chunks-1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if chunks < 6 {
		t.Fatalf("%d chunks: the test needs more", chunks)
	}
}

// A stream's scan closes each local source shard once it has read it,
// whole or in pieces: the upload reads the records from memory, or through
// files of its own. Kept open to the stream's end, a source of N shards
// held N descriptors (111 for 1,000,000 records in 100 shards), and a
// corpus of a million shards would run out of them.
func TestStreamClosesSourceShardsItHasRead(t *testing.T) {
	for _, c := range []struct {
		name        string
		shards, per int
		inPieces    bool
	}{{"whole", 40, 20, false}, {"pieces", 6, 300, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			want := writeShards(t, dir, c.shards, c.per)
			st, err := OpenStream(dir, ScanOptions{Strata: []string{"source"}})
			if err != nil || st == nil {
				t.Fatalf("OpenStream: %v", err)
			}
			defer st.Close()
			stores := localStores(t, t.TempDir(), 3)
			// Windows of 512 KiB, each shard's share 256 KiB (2 read at
			// once): shards of about 35 KiB are read whole, of about 500
			// KiB in pieces.
			res, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: 128 << 10, BlockSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			if res.Chunks < 3 || (st.pieces > 0) != c.inPieces {
				t.Fatalf("%d chunks, %d pieces: the test wants several chunks, and pieces only of large shards", res.Chunks, st.pieces)
			}
			l := st.files.(*localFiles)
			l.mu.Lock()
			open := len(l.open_)
			l.mu.Unlock()
			if open != 0 {
				t.Errorf("%d of %d source shards still open once the stream has read them all", open, c.shards)
			}
			recordsBack(t, stores, "ds", want)
		})
	}
}
