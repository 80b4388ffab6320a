package ingest

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardfs/shardfs/repository"
)

// A source released once planned (Options.ReleaseSource, as the CLI runs
// every ingest) commits exactly the manifest of one that is not, fields
// and strata included, and reads back byte for byte: the upload never
// needed its items' labels and fields. Planning it again is refused,
// not done with the fields gone.
func TestReleasedSourceCommitsTheSameAndIsNotPlannedAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := map[string]map[string][]byte{}
	sources := []string{"web", "web", "books", "code"}
	for s := range 6 {
		var shard [][2]string
		for r := range 50 {
			key := fmt.Sprintf("%06d", s*50+r)
			json := fmt.Sprintf(`{"source": %q, "score": %d, "caption": "a photo of %s"}`, sources[(s+r)%len(sources)], (s*31+r*7)%100, key)
			txt := strings.Repeat("caption "+key, 1+r%7)
			want[key] = map[string][]byte{"json": []byte(json), "txt": []byte(txt)}
			shard = append(shard, [2]string{key + ".json", json}, [2]string{key + ".txt", txt})
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%02d.tar", s)), goTar(t, tar.FormatUnknown, shard...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scan := func() *Source {
		src, err := ScanWith(dir, ScanOptions{Strata: []string{"source"}, Bins: []Bins{{Field: "score", Count: 3}}})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	base := Options{Data: 2, Parity: 1, ShardSize: 4 << 10, Seed: 9, BlockSize: 4096, Format: 3}
	kept, released := base, base
	kept.Name, kept.Stores = "kept", localStores(t, t.TempDir(), 3)
	released.Name, released.Stores, released.ReleaseSource = "released", localStores(t, t.TempDir(), 3), true
	a, err := Run(ctx, scan(), kept)
	if err != nil {
		t.Fatal(err)
	}
	src := scan()
	if _, err := Run(ctx, src, released); err != nil {
		t.Fatal(err)
	}
	for i, it := range src.Items {
		if it.Labels != nil || it.Fields != nil {
			t.Fatalf("item %d (%s) still holds labels %q and fields %q after a released plan", i, it.Key, it.Labels, it.Fields)
		}
	}
	ds, err := repository.Open(ctx, released.Stores, "released", repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := ds.Manifest
	sameManifest(t, a.Manifest, b)
	if fmt.Sprint(a.Manifest.Strata) != fmt.Sprint(b.Strata) || len(b.Strata) != 9 {
		t.Fatalf("strata differ: %v and %v (want 3 sources × 3 score bins)", a.Manifest.Strata, b.Strata)
	}
	for i := range b.Samples.Len() {
		if got, exp := b.Samples.FieldsJoined(i), a.Manifest.Samples.FieldsJoined(i); got != exp || !strings.Contains(got, "a photo of "+b.Samples.Key(i)) {
			t.Fatalf("sample %d (%s): fields %q, want %q with its caption", i, b.Samples.Key(i), got, exp)
		}
	}
	recordsBack(t, released.Stores, "released", want)

	again := released
	again.Name = "again"
	if _, err := Run(ctx, src, again); err == nil || !strings.Contains(err.Error(), "scan it again") {
		t.Fatalf("a released source was planned again: %v", err)
	}
	if _, err := RunPart(ctx, src, again, Part{0, 2}, "job"); err == nil || !strings.Contains(err.Error(), "scan it again") {
		t.Fatalf("a part planned a released source: %v", err)
	}
}
