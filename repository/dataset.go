package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/verify"
)

// ErrNotFound: no store holds a manifest for the dataset name.
var ErrNotFound = errors.New("dataset not found")

// MaxNameLen bounds a dataset name.
const MaxNameLen = 128

// CheckName accepts a dataset name: 1 to 128 letters, digits, '-', '_' and
// '.', starting with a letter or digit. A name never holds '/', so no
// dataset's objects can fall inside another's namespace.
func CheckName(name string) error {
	ok := name != "" && len(name) <= MaxNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		ok = alnum || i > 0 && (c == '-' || c == '_' || c == '.')
	}
	if !ok {
		return fmt.Errorf("dataset name %q: use 1 to %d letters, digits, '-', '_' and '.', starting with a letter or digit (no '/', spaces or control characters)", name, MaxNameLen)
	}
	return nil
}

// Dataset is an opened, committed dataset.
type Dataset struct {
	Name     string
	Manifest *manifest.Manifest // the version opened
	// Current is the header of the dataset's current version when it was
	// opened: Manifest's own, unless an older version was asked for.
	Current manifest.Header
	Stores  []backend.Store
	Reader  *erasure.Reader
	// Places says, per store, what its identity proves; see Place.
	Places []Place
	// Lazy is set when the dataset is in format 2 or 3 and was opened with
	// LazyIndexes: Manifest then holds no samples (in format 3, no shards
	// either), and Lazy fetches each shard's rows when the shard is first
	// needed.
	Lazy *LazyCatalog
	// LostIndexes lists the shards whose index had no intact copy on any
	// store, when opened with LostIndexesOK (verify and repair): their rows
	// in Manifest are placeholders, never read.
	LostIndexes []int
	// LostGroups lists the format-3 groups whose object had no intact copy
	// on any store, when opened with LostIndexesOK: their shards are in
	// LostIndexes too.
	LostGroups []int
	log        *slog.Logger

	replacedMu  sync.Mutex // guards replacedAt, replacedErr
	replacedAt  time.Time
	replacedErr error
}

// Options for Open.
type Options struct {
	Logger  *slog.Logger
	Metrics erasure.Metrics
	// LazyIndexes leaves a format-2 or format-3 dataset's shard indexes
	// (and format 3's group objects) on the stores until a shard is first
	// needed (see LazyCatalog); format 1 is always read whole.
	LazyIndexes bool
	// LostIndexesOK opens a format-2 dataset even when some shard's index
	// has no intact copy on any store, listing those shards in LostIndexes,
	// so that verify can name them and repair can mend everything else.
	LostIndexesOK bool
	// Version opens that version of the dataset (see version.go); 0 opens
	// the current one.
	Version int
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
	if err := backend.CheckDistinct(stores); err != nil {
		return nil, err
	}
	copies := readCopies(ctx, stores, name)
	cur, err := chooseManifest(copies, stores, name, log)
	if err != nil {
		return nil, err
	}
	m := cur
	if opts.Version != 0 {
		if m, err = loadVersion(ctx, stores, cur, opts.Version); err != nil {
			return nil, err
		}
	}
	var lazy *LazyCatalog
	var lost, lostGroups []int
	if opts.LazyIndexes && m.Root != nil && m.Top == nil {
		// Format 3: not even a group object is read until its samples are.
		if lazy, err = NewRootCatalog(m.Root, stores, log); err != nil {
			return nil, err
		}
		m = lazy.Manifest()
	} else if m, lostGroups, err = expandRoot(ctx, stores, m, opts.LostIndexesOK); err != nil {
		return nil, err
	} else if opts.LazyIndexes && m.Top != nil && m.Samples.Len() == 0 {
		if lazy, err = newLazyCatalog(m.Top, stores, log); err != nil {
			return nil, err
		}
		lazy.Manifest().Root = m.Root
		m = lazy.Manifest()
	} else if m, lost, err = loadIndexes(ctx, stores, m, opts.LostIndexesOK, shardsOfGroups(m.Root, lostGroups)); err != nil {
		return nil, err
	}
	if len(stores) != m.Data+m.Parity {
		return nil, fmt.Errorf("dataset %s needs k+m = %d stores (k=%d, m=%d), %d given: pass the same --stores as at ingest, in the same order",
			name, m.Data+m.Parity, m.Data, m.Parity, len(stores))
	}
	places, err := checkPlaces(copies, stores, cur)
	if err != nil {
		return nil, err
	}
	var exclude []int
	for i, p := range places {
		if p.State == Foreign {
			exclude = append(exclude, i)
			log.Warn("store holds another dataset or ingest of this name; reading around it", "store", i, "name", stores[i].String(), "holds", p.Detail)
		}
	}
	codec, err := erasure.NewCodec(erasure.Params{Data: m.Data, Parity: m.Parity, BlockSize: m.BlockSize})
	if err != nil {
		return nil, err
	}
	r, err := erasure.NewReader(codec, stores, func(shard, frag int) string {
		return ShardFragmentKey(name, &m.Header, shard, frag)
	}, erasure.ReaderOptions{Metrics: opts.Metrics, Logger: log, Exclude: exclude, Number: func(shard int) int {
		_, n := m.ShardObject(shard)
		return n
	}})
	if err != nil {
		return nil, err
	}
	return &Dataset{Name: name, Manifest: m, Current: cur.Header, Stores: stores, Reader: r, Places: places, Lazy: lazy, LostIndexes: lost, LostGroups: lostGroups, log: log}, nil
}

// LoadManifest reads every store's copy of the manifest and returns the one
// that enough stores agree on (see the package comment).
func LoadManifest(ctx context.Context, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	return LoadManifestVersion(ctx, stores, name, 0, log)
}

// LoadManifestVersion is LoadManifest of version n (0: the current one).
func LoadManifestVersion(ctx context.Context, stores []backend.Store, name string, n int, log *slog.Logger) (*manifest.Manifest, error) {
	m, err := LoadVersionHeader(ctx, stores, name, n, log)
	if err != nil {
		return nil, err
	}
	if m, err = ExpandRoot(ctx, stores, m); err != nil {
		return nil, err
	}
	m, _, err = loadIndexes(ctx, stores, m, false, nil)
	return m, err
}

// LoadHeader is LoadManifest without a format-2 dataset's shard indexes:
// enough to tell which ingest is committed, and its parameters.
func LoadHeader(ctx context.Context, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return chooseManifest(readCopies(ctx, stores, name), stores, name, log)
}

// shardsOfGroups lists the shards of groups gs of r.
func shardsOfGroups(r *manifest.Root, gs []int) []int {
	var out []int
	for _, g := range gs {
		for s := r.FirstShard(g); s < r.FirstShard(g)+r.Groups[g].Shards; s++ {
			out = append(out, s)
		}
	}
	return out
}

// loadIndexes completes a format-2 manifest with its shards' indexes, each
// read from the first store whose copy matches the checksum the top-level
// manifest keeps; format 1 manifests are returned as they are. With lostOK,
// a shard whose index has no intact copy gets placeholder rows (one sample
// spanning the shard, zero checksums) and is listed in lost; without it,
// the load fails naming the shard.
func loadIndexes(ctx context.Context, stores []backend.Store, m *manifest.Manifest, lostOK bool, known []int) (*manifest.Manifest, []int, error) {
	t := m.Top
	if t == nil || m.Samples.Len() > 0 {
		return m, nil, nil
	}
	var lostMu sync.Mutex
	var lost []int
	idx := make([]*manifest.ShardIndex, len(t.Shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for si := range idx {
		if slices.Contains(known, si) { // a shard of a lost group: its index cannot be checked
			lost = append(lost, si)
			idx[si] = lostIndexPlaceholder(m, si)
			continue
		}
		g.Go(func() error {
			var errs []error
			for k := range stores {
				s := stores[(si+k)%len(stores)] // spread the reads over the stores
				x, err := readIndex(gctx, s, t, si)
				if err == nil {
					idx[si] = x
					return nil
				}
				errs = append(errs, err)
				if gctx.Err() != nil {
					return gctx.Err()
				}
			}
			if lostOK && !slices.ContainsFunc(errs, unavailable) {
				lostMu.Lock()
				lost = append(lost, si)
				lostMu.Unlock()
				idx[si] = lostIndexPlaceholder(m, si)
				return nil
			}
			return fmt.Errorf("dataset %s: shard %d's index: no intact copy on any store (%w)", t.Name, si, errors.Join(errs...))
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	slices.Sort(lost)
	root := m.Root
	m, err := manifest.Expand(t, idx)
	if err == nil {
		m.Root = root
	}
	return m, lost, err
}

// lostIndexPlaceholder stands in for shard si's lost index: one sample as
// large as the shard, with checksums that nothing is checked against.
func lostIndexPlaceholder(m *manifest.Manifest, si int) *manifest.ShardIndex {
	size := m.Top.Shards[si].Size
	frag := (size + int64(m.Data) - 1) / int64(m.Data)
	blocks := int((frag + int64(m.BlockSize) - 1) / int64(m.BlockSize))
	return &manifest.ShardIndex{Shard: si, Sums: make([]uint32, (m.Data+m.Parity)*blocks),
		Keys: []string{fmt.Sprintf("lost-index-of-shard-%08d", si)}, Stratum: []uint32{0}, Size: []uint32{uint32(size)}, Sum: []uint32{0}}
}

// ReadIndexBytes reads shard si's index object from s and checks it
// against the size and checksum the top-level manifest keeps.
func ReadIndexBytes(ctx context.Context, s backend.Store, t *manifest.Top, si int) ([]byte, error) {
	ref := t.Shards[si]
	return readChecked(ctx, s, ShardIndexKey(t.Name, &t.Header, si), ref.IndexSize, ref.IndexSum)
}

// readChecked reads store s's copy of a metadata object whose size and
// CRC32C a manifest keeps (a shard index, a group object), and checks it.
func readChecked(ctx context.Context, s backend.Store, key string, size int64, sum uint32) ([]byte, error) {
	if size < 0 || size > 4<<30 {
		return nil, fmt.Errorf("%w: %s of %d bytes", manifest.ErrCorrupt, key, size)
	}
	b := make([]byte, size)
	if err := s.ReadAt(ctx, key, b, 0); err != nil {
		return nil, err
	}
	if manifest.IndexSum(b) != sum {
		return nil, fmt.Errorf("store %s: %s: %w: checksum mismatch", s, key, manifest.ErrCorrupt)
	}
	return b, nil
}

// firstIntact is read's result from the first store, trying them in turn
// from stores[start], for which it succeeds; else every store's error.
func firstIntact[T any](ctx context.Context, stores []backend.Store, start int, read func(backend.Store) (T, error)) (T, error) {
	var errs []error
	for k := range stores {
		x, err := read(stores[(start+k)%len(stores)])
		if err == nil {
			return x, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	var zero T
	return zero, errors.Join(errs...)
}

func readIndex(ctx context.Context, s backend.Store, t *manifest.Top, si int) (*manifest.ShardIndex, error) {
	b, err := ReadIndexBytes(ctx, s, t, si)
	if err != nil {
		return nil, err
	}
	x, err := manifest.DecodeIndex(b, t, si)
	if err != nil {
		return nil, fmt.Errorf("store %s: %s: %w", s, ShardIndexKey(t.Name, &t.Header, si), err)
	}
	return x, nil
}

func joinErrs(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	return "; failing: " + errors.Join(errs...).Error()
}

func readManifestKey(ctx context.Context, s backend.Store, key string) (*manifest.Manifest, error) {
	_, m, err := readManifestBytes(ctx, s, key)
	return m, err
}

// readManifestBytes reads and decodes the manifest (of any format) that s
// holds under key, and returns its bytes too.
func readManifestBytes(ctx context.Context, s backend.Store, key string) ([]byte, *manifest.Manifest, error) {
	// One request for a manifest of up to a chunk (all but the largest:
	// a mount's start waits for it); a larger one is read in chunks, so
	// each request is bounded by the store's per-request timeout however
	// large the manifest is.
	const chunk = 8 << 20
	first, size, whole, err := readUpTo(ctx, s, key, chunk)
	if err != nil {
		return nil, nil, err
	}
	if size > 16<<30 {
		return nil, nil, fmt.Errorf("store %s: manifest of %d bytes is implausible", s, size)
	}
	b := first
	if !whole { // the rest, after the first chunk the request read
		b = make([]byte, size)
		copy(b, first)
		for off := int64(len(first)); off < size; off += chunk {
			if err := s.ReadAt(ctx, key, b[off:min(size, off+chunk)], off); err != nil {
				return nil, nil, err
			}
		}
	}
	var m *manifest.Manifest
	if manifest.IsRoot(b) {
		var r *manifest.Root
		if r, err = manifest.DecodeRoot(b); err == nil {
			m = r.Manifest()
		}
	} else if manifest.IsTop(b) {
		var t *manifest.Top
		if t, err = manifest.DecodeTop(b); err == nil {
			m = t.Manifest()
		}
	} else {
		m, err = manifest.Decode(b)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store %s: %s: %w", s, key, err)
	}
	if name, _, _ := strings.Cut(key, "/"); m.Name != name {
		return nil, nil, fmt.Errorf("store %s: %s names dataset %q: %w", s, key, m.Name, manifest.ErrCorrupt)
	}
	return b, m, nil
}

// Shard returns the erasure view of shard i. A dataset opened with
// LazyIndexes has no block checksums here: its reads go through Lazy.
func (d *Dataset) Shard(i int) *erasure.Shard {
	return &erasure.Shard{ID: i, FragSize: d.Manifest.FragSize(i), Sums: d.Manifest.Shards[i].Sums}
}

// ReadSample returns the bytes of sample i, verified by block checksums and
// by its own checksum. Like every read here, it may return its bytes with
// an *erasure.HealNeeded: the read succeeded, and the shard needs healing.
func (d *Dataset) ReadSample(ctx context.Context, i int) ([]byte, error) {
	if d.Lazy != nil {
		shard, off, size := d.Lazy.Locate(i)
		if size < 0 {
			return nil, fmt.Errorf("sample %d: its shard's index is unavailable", i)
		}
		return d.ReadRange(ctx, shard, off, size)
	}
	s := &d.Manifest.Samples
	b, err := d.Reader.ReadRange(ctx, d.Shard(int(s.Shard[i])), int64(s.Offset[i]), int64(s.Size[i]))
	if err != nil && erasure.Heal(err) == nil {
		return nil, err
	}
	if !verify.Bytes(b, s.Sum[i]) {
		return nil, fmt.Errorf("sample %q: %w", s.Key(i), erasure.ErrChecksum)
	}
	return b, err
}

// ReadRange returns the verified bytes [off, off+n) of shard's data. A range
// made of whole samples (the common case: samples are packed back to back)
// is read exactly and verified by the samples' own checksums; any other
// range, or any failure, goes through the block-verified, degraded-capable path.
func (d *Dataset) ReadRange(ctx context.Context, shard int, off, n int64) ([]byte, error) {
	out := make([]byte, n)
	err := d.ReadRangeV(ctx, shard, off, [][]byte{out})
	if err != nil && erasure.Heal(err) == nil {
		return nil, err
	}
	return out, err
}

// ReadRangeV is ReadRange into bufs, which the range's bytes fill in turn:
// the bytes of a range of whole samples go from the stores' responses
// straight into them.
func (d *Dataset) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	err := d.readRangeV(ctx, shard, off, bufs)
	if err != nil && errors.Is(err, backend.ErrNotExist) {
		if rerr := d.Replaced(ctx); rerr != nil {
			return fmt.Errorf("%w (%v)", rerr, err)
		}
	}
	return err
}

// ErrReplaced: the stores now hold another ingest of the dataset than the one opened.
var ErrReplaced = errors.New("dataset was replaced on the stores")

// Replaced checks, at most every few seconds, whether the stores now agree
// on another ingest of this dataset (an ingest --force, an append or a
// rollback since it was opened), which is why its fragments are gone: it
// returns ErrReplaced then, and keeps returning it.
func (d *Dataset) Replaced(ctx context.Context) error {
	d.replacedMu.Lock()
	defer d.replacedMu.Unlock()
	if d.replacedErr != nil || time.Since(d.replacedAt) < 5*time.Second {
		return d.replacedErr
	}
	d.replacedAt = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := LoadHeader(cctx, d.Stores, d.Name, nil) // the ingest id is enough
	if err == nil && m.IngestID != d.Current.IngestID {
		d.replacedErr = fmt.Errorf("%w: dataset %s was replaced (ingest %s was current when it was opened; the stores now hold ingest %s): restart the mount to read the new one",
			ErrReplaced, d.Name, d.Current.IngestID, m.IngestID)
		d.log.Error(d.replacedErr.Error())
	}
	return d.replacedErr
}

// readRangeV is the one range reader, for both formats: a range that is
// exactly whole samples is read as it is and accepted only if every
// sample's checksum matches; any other is read widened to checksum blocks.
func (d *Dataset) readRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	sh, rs, err := d.rangeView(ctx, shard, off, int64(backend.VecLen(bufs)))
	if err != nil {
		return err
	}
	first, last, whole := rs.wholeSamples(off, int64(backend.VecLen(bufs)))
	if !whole {
		return d.Reader.ReadRangeV(ctx, sh, off, bufs)
	}
	return d.Reader.ReadExactV(ctx, sh, off, bufs, func(v [][]byte) bool {
		return rs.Whole(v, off, first, last)
	})
}

// rangeView is shard's erasure view and rows that hold [off, off+n) if any
// do: the manifest's, or (lazy indexes) those held or fetched.
func (d *Dataset) rangeView(ctx context.Context, shard int, off, n int64) (*erasure.Shard, rows, error) {
	if d.Lazy != nil {
		sh, r, err := d.Lazy.readView(ctx, shard, off, n)
		if err != nil {
			return nil, rows{}, err
		}
		return sh, r.rows(), nil
	}
	m := &d.Manifest.Shards[shard]
	s := &d.Manifest.Samples
	lo, hi := m.FirstSample, m.FirstSample+m.NumSamples
	return d.Shard(shard), rows{verify.Samples{Off: s.Offset[lo:hi], Size: s.Size[lo:hi], Sum: s.Sum[lo:hi]}}, nil
}

// rows is what a range read needs of some samples of a shard, ascending by
// offset: each one's offset, size and checksum, which verify checks them by.
type rows struct{ verify.Samples }

// wholeSamples reports whether [off, off+n) of the shard is exactly rows
// [first, last), back to back.
func (r rows) wholeSamples(off, n int64) (first, last int, ok bool) {
	first = sort.Search(len(r.Off), func(k int) bool { return int64(r.Off[k]) >= off })
	if first == len(r.Off) || int64(r.Off[first]) != off {
		return 0, 0, false
	}
	end, at := off+n, off
	last = first
	for last < len(r.Off) && at < end && int64(r.Off[last]) == at {
		at += int64(r.Size[last])
		last++
	}
	return first, last, at == end
}
