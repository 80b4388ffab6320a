// Package dataset owns a committed dataset as the stores hold it: where its
// objects live, how its manifest is found among the k+m copies, and the
// whole-dataset checks (verify) and fixes (repair).
//
// Object layout in every store:
//
//	NAME/manifest                          the commit point, one copy per store
//	NAME/data/INGEST-ID/SSSSSSSS.FF        fragment FF of shard SSSSSSSS
//
// Fragments of an ingest that never committed have no manifest naming their
// INGEST-ID; they are invisible and are removed by the next ingest of NAME.
package dataset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
)

// ErrNotFound: no store holds a manifest for the dataset name.
var ErrNotFound = errors.New("dataset not found")

// ManifestKey is the object key of a dataset's manifest.
func ManifestKey(name string) string { return name + "/manifest" }

// DataPrefix is the prefix of all fragment objects of a dataset.
func DataPrefix(name string) string { return name + "/data/" }

// FragmentKey names fragment frag of shard in ingest ingestID of dataset name.
func FragmentKey(name, ingestID string, shard, frag int) string {
	return fmt.Sprintf("%s/data/%s/%08d.%02d", name, ingestID, shard, frag)
}

// CheckName accepts a dataset name: a clean relative key of its own.
func CheckName(name string) error {
	if err := backend.CheckKey(name); err != nil || strings.Contains(name, "/data/") || strings.HasSuffix(name, "/manifest") {
		return fmt.Errorf("dataset name %q: use letters, digits, '-', '_', '.' and '/' between path elements", name)
	}
	return nil
}

// Dataset is an opened, committed dataset.
type Dataset struct {
	Name     string
	Manifest *manifest.Manifest
	Stores   []backend.Store
	Reader   *erasure.Reader
}

// Options for Open.
type Options struct {
	Logger  *slog.Logger
	Metrics erasure.Metrics
}

// Open loads the manifest of name from the stores. Copies are tried on every
// store; a corrupt or missing copy is skipped with a warning as long as one
// intact copy exists. When intact copies disagree (an interrupted --force
// re-ingest), the newest wins.
func Open(ctx context.Context, stores []backend.Store, name string, opts Options) (*Dataset, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	m, err := LoadManifest(ctx, stores, name, log)
	if err != nil {
		return nil, err
	}
	if len(stores) != m.Data+m.Parity {
		return nil, fmt.Errorf("dataset %s needs k+m = %d stores (k=%d, m=%d), %d given: pass the same --stores as at ingest, in the same order",
			name, m.Data+m.Parity, m.Data, m.Parity, len(stores))
	}
	codec, err := erasure.NewCodec(erasure.Params{Data: m.Data, Parity: m.Parity, BlockSize: m.BlockSize})
	if err != nil {
		return nil, err
	}
	r, err := erasure.NewReader(codec, stores, func(shard, frag int) string {
		return FragmentKey(name, m.IngestID, shard, frag)
	}, erasure.ReaderOptions{Metrics: opts.Metrics, Logger: log})
	if err != nil {
		return nil, err
	}
	return &Dataset{Name: name, Manifest: m, Stores: stores, Reader: r}, nil
}

// LoadManifest reads every store's copy of the manifest and returns the newest intact one.
func LoadManifest(ctx context.Context, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	type copyResult struct {
		m   *manifest.Manifest
		err error
	}
	results := make([]copyResult, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := readManifest(ctx, s, name)
			results[i] = copyResult{m, err}
		}()
	}
	wg.Wait()
	var best *manifest.Manifest
	var errs []error
	missing := 0
	for _, r := range results {
		switch {
		case r.err == nil:
			if best == nil || r.m.CreatedUnix > best.CreatedUnix {
				best = r.m
			}
		case errors.Is(r.err, backend.ErrNotExist):
			missing++
			errs = append(errs, r.err)
		default:
			errs = append(errs, r.err)
		}
	}
	if best != nil {
		for i, r := range results {
			if r.err != nil && !errors.Is(r.err, backend.ErrNotExist) {
				log.Warn("manifest copy unusable; using another store's copy", "store", i, "name", stores[i].String(), "err", r.err)
			}
		}
		return best, nil
	}
	if missing == len(stores) {
		return nil, fmt.Errorf("%w: no store holds %s: check the name and --stores (ingest first with shardfs ingest)", ErrNotFound, ManifestKey(name))
	}
	return nil, fmt.Errorf("no intact manifest of %s on any store: %w", name, errors.Join(errs...))
}

func readManifest(ctx context.Context, s backend.Store, name string) (*manifest.Manifest, error) {
	size, err := s.Stat(ctx, ManifestKey(name))
	if err != nil {
		return nil, err
	}
	if size > 16<<30 {
		return nil, fmt.Errorf("store %s: manifest of %d bytes is implausible", s, size)
	}
	b := make([]byte, size)
	if err := s.ReadAt(ctx, ManifestKey(name), b, 0); err != nil {
		return nil, err
	}
	m, err := manifest.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("store %s: %s: %w", s, ManifestKey(name), err)
	}
	if m.Name != name {
		return nil, fmt.Errorf("store %s: %s names dataset %q: %w", s, ManifestKey(name), m.Name, manifest.ErrCorrupt)
	}
	return m, nil
}

// Shard returns the erasure view of shard i.
func (d *Dataset) Shard(i int) *erasure.Shard {
	return &erasure.Shard{ID: i, FragSize: d.Manifest.FragSize(i), Sums: d.Manifest.Shards[i].Sums}
}

// ReadSample returns the bytes of sample i, verified by block checksums and by its own checksum.
func (d *Dataset) ReadSample(ctx context.Context, i int) ([]byte, error) {
	s := &d.Manifest.Samples
	b, err := d.Reader.ReadRange(ctx, d.Shard(int(s.Shard[i])), int64(s.Offset[i]), int64(s.Size[i]))
	if err != nil {
		return nil, err
	}
	if erasure.Checksum(b) != s.Sum[i] {
		return nil, fmt.Errorf("sample %q: %w", s.Key(i), erasure.ErrChecksum)
	}
	return b, nil
}

// ReadRange returns the verified bytes [off, off+n) of shard's data. A range
// made of whole samples (the common case: samples are packed back to back)
// is read exactly and verified by the samples' own checksums; any other
// range, or any failure, goes through the block-verified, degraded-capable path.
func (d *Dataset) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	first, last, whole := d.wholeSamples(shard, off, n)
	if !whole {
		return d.Reader.ReadRange(ctx, d.Shard(shard), off, n)
	}
	s := &d.Manifest.Samples
	return d.Reader.ReadExact(ctx, d.Shard(shard), off, n, func(b []byte) bool {
		for i := first; i < last; i++ {
			o := int64(s.Offset[i]) - off
			if erasure.Checksum(b[o:o+int64(s.Size[i])]) != s.Sum[i] {
				return false
			}
		}
		return true
	})
}

// wholeSamples reports whether [off, off+n) of shard is exactly samples [first, last).
func (d *Dataset) wholeSamples(shard int, off, n int64) (first, last int, ok bool) {
	sh := &d.Manifest.Shards[shard]
	s := &d.Manifest.Samples
	lo, hi := sh.FirstSample, sh.FirstSample+sh.NumSamples
	first = lo + sort.Search(hi-lo, func(i int) bool { return int64(s.Offset[lo+i]) >= off })
	if first == hi || int64(s.Offset[first]) != off {
		return 0, 0, false
	}
	end := off + n
	last = first + sort.Search(hi-first, func(i int) bool { return int64(s.Offset[first+i]) >= end })
	if last < hi {
		return first, last, int64(s.Offset[last]) == end
	}
	return first, last, sh.Size == end
}
