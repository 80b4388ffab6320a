package ingest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestKeptShardReadsMembersOnly: a kept shard reads a span from a
// member's start to a member's end as the shard reads it, members' bytes
// exact and zeros between, holds only the members' bytes, and refuses
// any other span, so headers never pass for the shard's bytes.
func TestKeptShardReadsMembersOnly(t *testing.T) {
	data := []byte("HHHHaaaPPbbbbHHcdddddTT")
	b := &recordBatch{records: []wdsRecord{
		{members: []MemberAt{{Off: 4, Size: 3}, {Off: 9, Size: 4}}},
		{members: []MemberAt{{Off: 15, Size: 1}, {Off: 16, Size: 5}}},
	}}
	k := keepMembers(data, b)
	if got := string(k.members); got != "aaabbbbcddddd" {
		t.Fatalf("kept %q, want the members' bytes only", got)
	}
	read := func(off, end int64) (string, error) {
		p := bytes.Repeat([]byte{'?'}, int(end-off))
		n, err := k.ReadAt(p, off)
		return string(p[:n]), err
	}
	for _, c := range []struct {
		off, end int64
		want     string
	}{
		{4, 7, "aaa"},
		{4, 13, "aaa\x00\x00bbbb"},
		{4, 21, "aaa\x00\x00bbbb\x00\x00cddddd"},
		{15, 21, "cddddd"},
		{9, 16, "bbbb\x00\x00c"},
	} {
		got, err := read(c.off, c.end)
		if err != nil || got != c.want {
			t.Errorf("ReadAt %d..%d = %q, %v; want %q", c.off, c.end, got, err, c.want)
		}
	}
	for _, bad := range [][2]int64{{0, 7}, {4, 23}, {5, 7}, {4, 8}, {0, 4}, {7, 9}, {21, 23}} {
		if got, err := read(bad[0], bad[1]); err == nil {
			t.Errorf("ReadAt %d..%d = %q: a span of headers or padding read without an error", bad[0], bad[1], got)
		}
	}
}

// TestKeptShardGivesRecordsUncopied: a record whose members a kept shard
// holds, each at its offset and size, is its members' bytes side by side,
// in the kept memory itself and capped there (an append cannot reach the
// next record's); a record it does not hold whole is not given, and
// keptRecords then gives none of the window's, which reads them as any
// shard's.
func TestKeptShardGivesRecordsUncopied(t *testing.T) {
	data := []byte("HHHHaaaPPbbbbHHcdddddTT")
	b := &recordBatch{records: []wdsRecord{
		{members: []MemberAt{{Off: 4, Size: 3}, {Off: 9, Size: 4}}},
		{members: []MemberAt{{Off: 15, Size: 1}, {Off: 16, Size: 5}}},
	}}
	k := keepMembers(data, b)
	all := []Item{
		{Key: "r0", Members: []MemberAt{{Off: 4, Size: 3}, {Off: 9, Size: 4}}},
		{Key: "r1", Members: []MemberAt{{Off: 15, Size: 1}, {Off: 16, Size: 5}}},
		{Key: "part", Members: []MemberAt{{Off: 9, Size: 4}, {Off: 15, Size: 2}}}, // a member's size not as kept
		{Key: "moved", Members: []MemberAt{{Off: 5, Size: 3}}},
		{Key: "none"},
	}
	for _, c := range []struct {
		i    int
		want string
	}{{0, "aaabbbb"}, {1, "cddddd"}} {
		got, ok := k.record(&all[c.i])
		if !ok || string(got) != c.want || cap(got) != len(got) || &got[0] != &k.members[k.at[2*c.i]] {
			t.Errorf("record %s = %q, %v (cap %d); want %q, in the kept memory", all[c.i].Key, got, ok, cap(got), c.want)
		}
	}
	for _, i := range []int{2, 3, 4} {
		if got, ok := k.record(&all[i]); ok {
			t.Errorf("record %s = %q: given, though the shard does not hold it as asked", all[i].Key, got)
		}
	}
	recs := make([][]byte, 2)
	if ok := keptRecords(all, []windowItem{{item: 0, row: 1}, {item: 1, row: 0}}, k, recs); !ok || string(recs[1]) != "aaabbbb" || string(recs[0]) != "cddddd" {
		t.Errorf("keptRecords of r0, r1 into rows 1, 0 = %q, %v", recs, ok)
	}
	if ok := keptRecords(all, []windowItem{{item: 0, row: 0}, {item: 3, row: 1}}, k, make([][]byte, 2)); ok {
		t.Errorf("keptRecords with a record not kept: given, want none, to be read from the shard")
	}
}

// TestStreamKeepsMembersNotArchives: a stream of shards whose members are
// a few bytes each (the archive is 60 times their bytes: tar headers and
// padding) keeps in memory about a chunk of its records' bytes, not the
// archives they came in. Keeping the archives held about 8 MB here.
func TestStreamKeepsMembersNotArchives(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const shards, per = 400, 50
	want := map[string]map[string][]byte{}
	for s := range shards {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for r := range per {
			key := fmt.Sprintf("%06d", s*per+r)
			members := map[string][]byte{"txt": []byte("c" + key), "json": []byte(fmt.Sprintf(`{"source":"s%d"}`, r%3))}
			want[key] = members
			for _, name := range []string{"json", "txt"} {
				if err := tw.WriteHeader(&tar.Header{Name: key + "." + name, Mode: 0o644, Size: int64(len(members[name])), Typeflag: tar.TypeReg}); err != nil {
					t.Fatal(err)
				}
				tw.Write(members[name])
			}
		}
		tw.Close()
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%04d.tar", s)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := OpenStream(dir, ScanOptions{Strata: []string{"source"}})
	if err != nil || st == nil {
		t.Fatal(err)
	}
	defer st.Close()
	stores := localStores(t, t.TempDir(), 3)
	const shardSize = 64 << 10 // windows of 256 KiB: shards of 100 KiB are kept up to 32 cores
	res, err := RunStream(ctx, st, Options{Name: "ds", Stores: stores, Data: 2, Parity: 1, ShardSize: shardSize, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks < 3 {
		t.Fatalf("%d chunks: the test wants several", res.Chunks)
	}
	// A chunk's records, those it carries to the next, and a group of
	// shards read ahead, with 16 bytes an extent.
	bound := 2*readWindow(shardSize) + shardSize + 16*int64(2*streamChunkRecords)
	if st.keptPeak == 0 || st.keptPeak > bound {
		t.Fatalf("kept at most %d bytes of source shards in memory, want some and at most %d", st.keptPeak, bound)
	}
	recordsBack(t, stores, "ds", want)
}
