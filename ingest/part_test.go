package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
	"github.com/shardfs/shardfs/verify"
)

func TestParsePart(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		arg  string
		env  func(string) string
		want Part
		err  string
	}{
		{"0/4", env(), Part{0, 4}, ""},
		{"3/4", env(), Part{3, 4}, ""},
		{"0/1", env(), Part{0, 1}, ""},
		{"auto", env("JOB_COMPLETION_INDEX", "2", "JOB_COMPLETIONS", "8"), Part{2, 8}, ""},
		{"auto", env("SLURM_ARRAY_TASK_ID", "5", "SLURM_ARRAY_TASK_MIN", "1", "SLURM_ARRAY_TASK_COUNT", "10"), Part{4, 10}, ""},
		{"auto", env("SLURM_ARRAY_TASK_ID", "0", "SLURM_ARRAY_TASK_COUNT", "3"), Part{0, 3}, ""},
		{"4/4", env(), Part{}, "0 <= I < N"},
		{"-1/4", env(), Part{}, "0 <= I < N"},
		{"1/0", env(), Part{}, "0 <= I < N"},
		{"2", env(), Part{}, "use I/N"},
		{"a/b", env(), Part{}, "0 <= I < N"},
		{"0/1000000", env(), Part{}, "0 <= I < N"},
		{"auto", env(), Part{}, "neither JOB_COMPLETION_INDEX"},
		{"auto", env("JOB_COMPLETION_INDEX", "1"), Part{}, "JOB_COMPLETIONS is not"},
		{"auto", env("SLURM_ARRAY_TASK_ID", "x", "SLURM_ARRAY_TASK_COUNT", "3"), Part{}, "not numbers"},
		{"auto", env("JOB_COMPLETION_INDEX", "8", "JOB_COMPLETIONS", "8"), Part{}, "0 <= I < N"},
	} {
		got, err := ParsePart(tc.arg, tc.env)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParsePart(%q) = %v, %v; want %v", tc.arg, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParsePart(%q) = %v, %v; want an error with %q", tc.arg, got, err, tc.err)
		}
	}
	if got := JobID("", func(k string) string { return map[string]string{"SLURM_ARRAY_JOB_ID": "991"}[k] }); got != "991" {
		t.Errorf("JobID from Slurm = %q", got)
	}
	if got := JobID("mine", func(string) string { return "env" }); got != "mine" {
		t.Errorf("JobID with a flag = %q", got)
	}
}

// localStores opens n file:// stores under dir.
func localStores(t testing.TB, dir string, n int) []backend.Store {
	t.Helper()
	var out []backend.Store
	for i := 0; i < n; i++ {
		s, err := backend.Open("file://"+filepath.Join(dir, fmt.Sprint("s", i)), backend.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func testSource(t *testing.T, n int) *Source {
	t.Helper()
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Imbalanced(n, 4, 0.6, 500, 9_000, 3)); err != nil {
		t.Fatal(err)
	}
	src, err := Scan(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// The manifest a distributed ingest commits equals the single-process
// one's in everything but its id and time: same samples, same shards, same
// checksums, for any number of parts, including more parts than shards.
func TestPartsCommitTheSingleProcessManifest(t *testing.T) {
	for _, format := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("format", format), func(t *testing.T) { partsCommitTheSingleProcessManifest(t, format) })
	}
}

func partsCommitTheSingleProcessManifest(t *testing.T, format int) {
	ctx := context.Background()
	src := testSource(t, 300)
	base := Options{Data: 2, Parity: 1, ShardSize: 64 << 10, Seed: 9, BlockSize: 4096, Format: format}
	single := base
	single.Name, single.Stores = "single", localStores(t, t.TempDir(), 3)
	want, err := Run(ctx, src, single)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Manifest.Shards) < 5 {
		t.Fatalf("only %d shards; the test wants several per part", len(want.Manifest.Shards))
	}
	for _, n := range []int{1, 3, len(want.Manifest.Shards) + 2} {
		opts := base
		opts.Name, opts.Stores = "dist", localStores(t, t.TempDir(), 3)
		for i := n - 1; i >= 0; i-- { // any order
			if _, err := RunPart(ctx, src, opts, Part{i, n}, "job"); err != nil {
				t.Fatalf("%d parts: part %d: %v", n, i, err)
			}
		}
		// A part of metadata format 2 or 3 leaves counts, not rows: its
		// shards' rows are in the indexes it wrote.
		refs, err := repository.ListParts(ctx, opts.Stores, "dist")
		if err != nil {
			t.Fatal(err)
		}
		records := 0
		for _, ref := range refs {
			if ref.Count != n {
				continue // not a record
			}
			var rec *partRecord
			for _, st := range opts.Stores {
				if b, err := repository.ReadWhole(ctx, st, repository.PartObject("dist", ref.Job, ref.Index, ref.Count)); err == nil {
					if rec, err = decodePart(b); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			if rec == nil {
				t.Fatalf("part %d/%d: no record", ref.Index, ref.Count)
			}
			records++
			wantFormat := map[bool]int{false: partRecordRows, true: partRecordCounts}[format >= 2]
			for _, ps := range rec.Owned {
				if rec.Format != wantFormat || (len(ps.Keys) > 0) != (format == 1) || (ps.Counts != nil) != (format >= 2) {
					t.Fatalf("%d parts, format %d: part %d's record is of format %d, shard %d with %d rows and counts %v", n, format, rec.Part, rec.Format, ps.Shard, len(ps.Keys), ps.Counts)
				}
			}
		}
		if records != n {
			t.Fatalf("%d parts: %d part records read", n, records)
		}
		res, err := Commit(ctx, CommitOptions{Name: "dist", Stores: opts.Stores})
		if err != nil {
			t.Fatalf("%d parts: commit: %v", n, err)
		}
		if format == 1 {
			sameManifest(t, want.Manifest, res.Manifest)
		} else {
			// The commit of a format-2 or -3 ingest holds each shard's
			// counts, not its rows: its top is the single process's.
			sameTop(t, want.Manifest.Top, res.Manifest.Top)
			if res.Samples != want.Samples || res.Bytes != want.Bytes || res.StoredBytes != want.StoredBytes {
				t.Fatalf("%d parts: commit reports %d samples, %d bytes, %d stored; the single process %d, %d, %d", n,
					res.Samples, res.Bytes, res.StoredBytes, want.Samples, want.Bytes, want.StoredBytes)
			}
		}
		ds, err := repository.Open(ctx, opts.Stores, "dist", repository.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if (ds.Manifest.Top != nil) != (format >= 2) {
			t.Fatalf("%d parts: committed in format %d, Top set %v", n, format, ds.Manifest.Top != nil)
		}
		sameManifest(t, want.Manifest, ds.Manifest)
		rep, err := ds.Verify(ctx, nil)
		if err != nil || !rep.Intact() {
			t.Fatalf("%d parts: the committed dataset does not verify: %v %+v", n, err, rep)
		}
		// The parts' records are gone; their fragments are the dataset's.
		for _, s := range opts.Stores {
			if keys, _ := s.List(ctx, repository.PartPrefix("dist")); len(keys) != 0 {
				t.Fatalf("%d parts: part objects left after commit: %v", n, keys)
			}
		}
	}
}

func sameTop(t *testing.T, a, b *manifest.Top) {
	t.Helper()
	if a == nil || b == nil || len(a.Shards) != len(b.Shards) || !sameStrata(a.Strata, b.Strata) {
		t.Fatalf("tops differ: %v and %v", a != nil, b != nil)
	}
	ra, rb := make([]int, len(a.Strata)), make([]int, len(b.Strata))
	for s := range a.Shards {
		a.Counts(s, ra)
		b.Counts(s, rb)
		if a.Shards[s] != b.Shards[s] || !slices.Equal(ra, rb) {
			t.Fatalf("shard %d differs: %+v %v, %+v %v", s, a.Shards[s], ra, b.Shards[s], rb)
		}
	}
}

func sameManifest(t *testing.T, a, b *manifest.Manifest) {
	t.Helper()
	if a.Samples.Len() != b.Samples.Len() || len(a.Shards) != len(b.Shards) || len(a.Strata) != len(b.Strata) {
		t.Fatalf("sizes differ: %d/%d samples, %d/%d shards", a.Samples.Len(), b.Samples.Len(), len(a.Shards), len(b.Shards))
	}
	for i := 0; i < a.Samples.Len(); i++ {
		if a.Samples.Key(i) != b.Samples.Key(i) || a.Samples.Stratum[i] != b.Samples.Stratum[i] || a.Samples.Shard[i] != b.Samples.Shard[i] ||
			a.Samples.Offset[i] != b.Samples.Offset[i] || a.Samples.Size[i] != b.Samples.Size[i] || a.Samples.Sum[i] != b.Samples.Sum[i] {
			t.Fatalf("sample %d differs: %s vs %s", i, a.Samples.Key(i), b.Samples.Key(i))
		}
	}
	for i := range a.Shards {
		if !slices.Equal(a.Shards[i].Sums, b.Shards[i].Sums) || a.Shards[i].Size != b.Shards[i].Size {
			t.Fatalf("shard %d differs", i)
		}
	}
	for i := range a.Strata {
		if a.Strata[i].Name != b.Strata[i].Name || a.Strata[i].Count != b.Strata[i].Count {
			t.Fatalf("stratum %d differs", i)
		}
	}
}

// Commit refuses what is not one whole ingest, names what to rerun, and
// leaves the name invisible; a damaged record copy is read from another
// store.
func TestCommitRefusesWhatIsNotWhole(t *testing.T) {
	ctx := context.Background()
	src := testSource(t, 200)
	dir := t.TempDir()
	opts := Options{Name: "ds", Stores: localStores(t, dir, 3), Data: 2, Parity: 1, ShardSize: 64 << 10, Seed: 1, BlockSize: 4096}
	commit := func(id string) error {
		_, err := Commit(ctx, CommitOptions{Name: "ds", Stores: opts.Stores, IngestID: id})
		return err
	}
	invisible := func() {
		t.Helper()
		if _, err := repository.LoadManifest(ctx, opts.Stores, "ds", nil); !errors.Is(err, repository.ErrNotFound) {
			t.Fatalf("dataset visible after a refused commit: %v", err)
		}
	}
	if err := commit(""); err == nil || !strings.Contains(err.Error(), "no parts") {
		t.Fatalf("commit with no parts: %v", err)
	}
	a0, err := RunPart(ctx, src, opts, Part{0, 2}, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(""); err == nil || !strings.Contains(err.Error(), "lacks parts 1/2") {
		t.Fatalf("commit with part 1/2 missing: %v", err)
	}
	invisible()
	// Another job's parts, of the same source: a different ingest.
	if _, err := RunPart(ctx, src, opts, Part{0, 2}, "b"); err != nil {
		t.Fatal(err)
	}
	b1, err := RunPart(ctx, src, opts, Part{1, 2}, "b")
	if err != nil {
		t.Fatal(err)
	}
	if a0.IngestID == b1.IngestID {
		t.Fatal("two jobs got one ingest id")
	}
	if _, err := RunPart(ctx, src, opts, Part{1, 2}, "a"); err != nil {
		t.Fatal(err)
	}
	if err := commit(""); err == nil || !strings.Contains(err.Error(), "--ingest-id") {
		t.Fatalf("commit with two whole ingests: %v", err)
	}
	invisible()
	// Delete one fragment of job a's shard 1 (part 1's): commit names part 1/2.
	frag := repository.FragmentKey("ds", a0.IngestID, 1, 0)
	if err := opts.Stores[erasure.Params{Data: opts.Data, Parity: opts.Parity}.Placement(1, 0)].Delete(ctx, frag); err != nil {
		t.Fatal(err)
	}
	if err := commit(a0.IngestID); err == nil || !strings.Contains(err.Error(), "--part 1/2") || !strings.Contains(err.Error(), "shard 1 fragment 0") {
		t.Fatalf("commit with a fragment missing: %v", err)
	}
	invisible()
	// Damage part 0's record on the first store: read from another copy.
	key := repository.PartKey("ds", b1.IngestID, 0, 2)
	if err := opts.Stores[0].Put(ctx, key, []byte("SHARDFS-PART-1\nnot a record")); err != nil {
		t.Fatal(err)
	}
	if err := commit(b1.IngestID); err != nil {
		t.Fatalf("commit with one damaged record copy: %v", err)
	}
	// Job a's parts are not this commit's: its fragments stay for its own commit.
	if keys, _ := opts.Stores[1].List(ctx, repository.DataPrefix("ds")+a0.IngestID+"/"); len(keys) == 0 {
		t.Fatal("the commit of job b purged the fragments of job a, whose parts are still pending")
	}
}

func FuzzDecodePart(f *testing.F) {
	rec := &partRecord{Format: 1, Name: "ds", IngestID: "job-1", Part: 0, Parts: 2, Data: 2, Parity: 1, BlockSize: 4096,
		Strata: []manifest.Stratum{{Name: "a", Labels: []string{"a"}, Count: 2}}, Shards: 2, Samples: 2,
		Owned: []partShard{{FragLen: 10, ShardIndex: manifest.ShardIndex{Shard: 0, Sums: []uint32{1, 2, 3}, Keys: []string{"a/1", "a/2"}, Stratum: []uint32{0, 0}, Size: []uint32{10, 10}, Sum: []uint32{5, 6}}}}}
	enc, err := encodePart(rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add([]byte(partMagic))
	f.Add(enc[len(partMagic)+4:])
	f.Fuzz(func(t *testing.T, b []byte) {
		// Past the checksum too: frame b as an intact record's body.
		framed := append([]byte(partMagic), binary.LittleEndian.AppendUint32(nil, verify.Sum(b))...)
		decodePart(append(framed, b...))
		rec, err := decodePart(b)
		if err != nil {
			return
		}
		again, err := encodePart(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodePart(again); err != nil {
			t.Fatalf("a decoded record does not decode again: %v", err)
		}
	})
}

// A commit of metadata format 2 or 3 keeps per shard its counts, not its
// rows; what it checked in the rows it still checks, and refuses by name.
func TestThinRecordsRefuseWhatTheRowsContradict(t *testing.T) {
	strata := []manifest.Stratum{{Name: "a", Labels: []string{"a"}, Count: 3}, {Name: "b", Labels: []string{"b"}, Count: 1}}
	records := func() []*partRecord {
		rec := func(part int, owned ...partShard) *partRecord {
			return &partRecord{Format: 1, Metadata: 2, Name: "ds", IngestID: "job-1", Part: part, Parts: 2, Data: 2, Parity: 1, BlockSize: 4096, LabelFields: []string{"label"},
				Strata: slices.Clone(strata), Shards: 2, Samples: 4, Owned: owned}
		}
		shard := func(s int, keys []string, stratum []uint32, size []uint32) partShard {
			var n int64
			for _, x := range size {
				n += int64(x)
			}
			return partShard{FragLen: (n + 1) / 2, IndexSize: 100 + int64(s), IndexSum: uint32(7 + s),
				ShardIndex: manifest.ShardIndex{Shard: s, Keys: keys, Stratum: stratum, Size: size, Sum: make([]uint32, len(keys))}}
		}
		return []*partRecord{
			rec(0, shard(0, []string{"a/1", "a/2", "b/1"}, []uint32{0, 0, 1}, []uint32{10, 11, 12})),
			rec(1, shard(1, []string{"a/3"}, []uint32{0}, []uint32{5})),
		}
	}
	stores := []string{"s0", "s1", "s2"}
	commit := func(recs []*partRecord) (*manifest.Manifest, error) {
		for _, r := range recs {
			if err := thin("ds", r); err != nil {
				return nil, err
			}
		}
		return assembleTop("ds", recs, nil, stores)
	}
	m, err := commit(records())
	if err != nil {
		t.Fatal(err)
	}
	row := make([]int, 2)
	m.Top.Counts(0, row)
	if m.Top.Samples() != 4 || m.Shards[0].Size != 33 || m.Shards[1].Size != 5 || row[0] != 2 || row[1] != 1 ||
		m.Top.Shards[1].IndexSize != 101 || m.Top.Shards[1].IndexSum != 8 || m.Strata[0].Count != 3 {
		t.Fatalf("top: %d samples, shard sizes %d %d, shard 0 counts %v, %+v", m.Top.Samples(), m.Shards[0].Size, m.Shards[1].Size, row, m.Top.Shards[1])
	}
	for _, c := range []struct {
		name, want string
		damage     func(recs []*partRecord)
	}{
		{"strata out of order", "stratum 0 out of order", func(r []*partRecord) { r[0].Owned[0].Stratum = []uint32{0, 1, 0} }},
		{"a stratum past the plan's", "stratum 2 out of order or of 2", func(r []*partRecord) { r[1].Owned[0].Stratum = []uint32{2} }},
		{"fragments of another size", "shard 1's fragments are 9 bytes, its samples make 3", func(r []*partRecord) { r[1].Owned[0].FragLen = 9 }},
		{"a column short", "shard 0's sample columns differ in length", func(r []*partRecord) { r[0].Owned[0].Size = r[0].Owned[0].Size[:2] }},
		{"a key with ..", "shard 1 sample 0: key \"../x\"", func(r []*partRecord) { r[1].Owned[0].Keys = []string{"../x"} }},
		{"a shard missing", "no part holds shard 1", func(r []*partRecord) { r[1].Owned = nil }},
		{"a sample fewer than the plan", "the parts hold 3 samples, the plan 4", func(r []*partRecord) {
			r[0].Owned[0].ShardIndex = manifest.ShardIndex{Shard: 0, Keys: []string{"a/1", "b/1"}, Stratum: []uint32{0, 1}, Size: []uint32{10, 23}, Sum: []uint32{0, 0}}
		}},
		{"strata counts other than the plan's", "stratum a: 4 samples in the shards, 3 in the plan", func(r []*partRecord) {
			r[0].Owned[0].Stratum = []uint32{0, 0, 0}
		}},
	} {
		recs := records()
		c.damage(recs)
		if _, err := commit(recs); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "the parts do not form one ingest") {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// A record of counts (a part of metadata format 2 or 3) makes the top the
// same record with rows makes, and what its counts contradict is refused
// by name, as thin refuses rows.
func TestCountRecordsMakeTheTopAndRefuseContradictions(t *testing.T) {
	strata := []manifest.Stratum{{Name: "a", Labels: []string{"a"}, Count: 3}, {Name: "b", Labels: []string{"b"}, Count: 1}}
	records := func() []*partRecord {
		rec := func(part int, owned ...partShard) *partRecord {
			return &partRecord{Format: partRecordCounts, Metadata: 2, Name: "ds", IngestID: "job-1", Part: part, Parts: 2, Data: 2, Parity: 1, BlockSize: 4096, LabelFields: []string{"label"},
				Strata: slices.Clone(strata), Shards: 2, Samples: 4, Owned: owned}
		}
		shard := func(s int, counts []int, bytes int64) partShard {
			return partShard{FragLen: (bytes + 1) / 2, IndexSize: 100 + int64(s), IndexSum: uint32(7 + s), ShardIndex: manifest.ShardIndex{Shard: s}, Counts: counts, Bytes: bytes}
		}
		return []*partRecord{rec(0, shard(0, []int{2, 1}, 33)), rec(1, shard(1, []int{1, 0}, 5))}
	}
	commit := func(recs []*partRecord) (*manifest.Manifest, error) {
		for _, r := range recs {
			if err := thin("ds", r); err != nil {
				return nil, err
			}
		}
		return assembleTop("ds", recs, nil, []string{"s0", "s1", "s2"})
	}
	m, err := commit(records())
	if err != nil {
		t.Fatal(err)
	}
	row := make([]int, 2)
	m.Top.Counts(0, row)
	if m.Top.Samples() != 4 || m.Shards[0].Size != 33 || m.Shards[1].Size != 5 || row[0] != 2 || row[1] != 1 || m.Top.Shards[1].IndexSize != 101 || m.Top.Shards[1].IndexSum != 8 {
		t.Fatalf("top: %d samples, shard sizes %d %d, shard 0 counts %v, %+v", m.Top.Samples(), m.Shards[0].Size, m.Shards[1].Size, row, m.Top.Shards[1])
	}
	for _, c := range []struct {
		name, want string
		damage     func(recs []*partRecord)
	}{
		{"a count short", "shard 0: 1 counts for 2 strata", func(r []*partRecord) { r[0].Owned[0].Counts = []int{3} }},
		{"rows beside counts", "1 rows in a record of counts", func(r []*partRecord) { r[1].Owned[0].Keys = []string{"a/3"} }},
		{"a negative count", "shard 1: counts [2 -1]", func(r []*partRecord) { r[1].Owned[0].Counts = []int{2, -1} }},
		{"fragments of another size", "shard 1's fragments are 9 bytes, its samples make 3", func(r []*partRecord) { r[1].Owned[0].FragLen = 9 }},
		{"a sample fewer than the plan", "the parts hold 3 samples, the plan 4", func(r []*partRecord) { r[0].Owned[0].Counts = []int{1, 1} }},
		{"strata counts other than the plan's", "stratum a: 4 samples in the shards, 3 in the plan", func(r []*partRecord) { r[0].Owned[0].Counts = []int{3, 0} }},
		{"a shard missing", "no part holds shard 1", func(r []*partRecord) { r[1].Owned = nil }},
	} {
		recs := records()
		c.damage(recs)
		if _, err := commit(recs); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "the parts do not form one ingest") {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A record of counts for metadata format 1, which needs rows, is no
	// record this shardfs wrote.
	rec := records()[0]
	rec.Metadata = 1
	b, err := encodePart(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodePart(b); !errors.Is(err, errBadPart) {
		t.Errorf("a record of counts for metadata format 1 decoded: %v", err)
	}
}

// A distributed ingest's commit replaces state (the manifest copies and
// identities, a replaced dataset's current version, the part records), so
// it is tried with random kills (every write after a random one fails,
// the lock's release too) and a random store failing a random write, on a
// fresh name and over a committed dataset (--force), in metadata formats
// 1, 2 and 3: after each stopped try, the current version is whole and
// serves its samples byte for byte: the parts' dataset, or, not committed,
// the one before (none, for a fresh name). A commit that said it was done
// committed. A rerun without faults then commits, verify finds nothing to
// mend, no part record is left, and a replaced version still serves.
func TestPartsCommitUnderKillsAndStoreFailures(t *testing.T) {
	ctx := context.Background()
	old, fresh := tree(t, 50, 3, "", 1), tree(t, 70, 3, "b", 2)
	rng := rand.New(rand.NewPCG(59, 2))
	trials := 18
	if testing.Short() {
		trials = 6
	}
	for trial := range trials {
		replacing := trial%2 == 1
		base := localStores(t, t.TempDir(), 3)
		opts := Options{Name: "ds", Stores: base, Data: 2, Parity: 1, ShardSize: 64 << 10, BlockSize: 4096, Seed: 5, Format: 1 + trial%3, Force: replacing}
		if replacing {
			if _, err := Run(ctx, old, opts); err != nil {
				t.Fatal(err)
			}
		}
		const parts = 3
		var id string
		for i := range parts {
			res, err := RunPart(ctx, fresh, opts, Part{i, parts}, "job")
			if err != nil {
				t.Fatalf("trial %d: part %d: %v", trial, i, err)
			}
			id = res.IngestID
		}
		killAfter := rng.IntN(40) // a commit here writes and deletes about 20 to 35 objects
		stores, failing := stoppingStores(base, rng, killAfter, 12)
		_, err := Commit(ctx, CommitOptions{Name: "ds", Stores: stores, Force: replacing})
		t.Logf("trial %d (format %d, replacing %v): killed after %d writes, store %d fails its write %d: %v", trial, opts.Format, replacing, killAfter, failing, stores[failing].(*stopping).failAt, err)
		// Whatever stopped it, what is current is whole.
		ds, openErr := repository.Open(ctx, base, "ds", repository.Options{})
		switch {
		case openErr != nil:
			if replacing || err == nil {
				t.Fatalf("trial %d: the commit returned %v, and then the dataset does not open: %v", trial, err, openErr)
			}
		case ds.Manifest.IngestID == id:
			checkServes(t, base, 0, fresh)
		default:
			if !replacing || err == nil {
				t.Fatalf("trial %d: the commit returned %v, and then ingest %s is current, not the parts' %s", trial, err, ds.Manifest.IngestID, id)
			}
			checkServes(t, base, 0, old)
		}
		// A rerun without faults commits what is left. The stopped commit
		// may have left its lock (its release was cut off too): its
		// process, this one, lives on, where a killed one's lock is taken
		// over at once, so it goes here as the kill would let it go.
		for _, s := range base {
			s.Delete(ctx, repository.LockKey("ds"))
		}
		if _, err := Commit(ctx, CommitOptions{Name: "ds", Stores: base, Force: replacing}); err != nil && !errors.Is(err, ErrAlreadyCommitted) {
			t.Fatalf("trial %d: the commit again, without faults: %v", trial, err)
		}
		ds = checkServes(t, base, 0, fresh)
		if ds.Manifest.IngestID != id {
			t.Fatalf("trial %d: ingest %s is current after the rerun, not the parts' %s", trial, ds.Manifest.IngestID, id)
		}
		if replacing {
			checkServes(t, base, 1, old)
		}
		// A store that failed while the commit wrote the copies every store
		// holds (group objects, written with parity+1) may miss one: a
		// copy, never a fragment, and repair writes it.
		rep, err := ds.Verify(ctx, nil)
		if err != nil || len(rep.Pending) != 0 || len(rep.Damaged) != 0 || len(rep.Unrecoverable) != 0 || len(rep.BadSamples) != 0 {
			t.Fatalf("trial %d: after the rerun: %v %+v", trial, err, rep)
		}
		if !rep.Intact() {
			if _, err := ds.Repair(ctx, rep, false, nil); err != nil {
				t.Fatalf("trial %d: repair after the rerun: %v", trial, err)
			}
			if rep, err = ds.Verify(ctx, nil); err != nil || !rep.Intact() {
				t.Fatalf("trial %d: after the rerun and repair: %v %+v", trial, err, rep)
			}
		}
		for _, s := range base {
			if keys, _ := s.List(ctx, repository.PartPrefix("ds")); len(keys) != 0 {
				t.Fatalf("trial %d: part objects left after the rerun: %v", trial, keys)
			}
		}
	}
}

// A damaged part record whose zstd frame declares a 256 MiB window (10
// bytes in all) is refused, not decoded with a 256 MiB buffer: the old
// bound let it allocate that for each such input, and a FuzzDecodePart
// worker died under them in CI.
func TestDamagedPartRecordAllocatesNoLargeWindow(t *testing.T) {
	// Frame magic, no single segment, window 2^28; one last raw block of 1 byte.
	body := []byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x90, 0x09, 0x00, 0x00, 0x01}
	framed := append([]byte(partMagic), binary.LittleEndian.AppendUint32(nil, verify.Sum(body))...)
	framed = append(framed, body...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decodePart(framed)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errBadPart) {
		t.Fatalf("a frame with a 256 MiB window: %v, want a damaged part record", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Fatalf("refusing a 10-byte record allocated %d MiB", got>>20)
	}
}
