// Package dataset owns a committed dataset as the stores hold it: where its
// objects live, how its manifest is found among the k+m copies, and the
// whole-dataset checks (verify) and fixes (repair).
//
// Object layout in every store:
//
//	NAME/manifest                          the commit point, one copy per store
//	NAME/identity                          this store's place: dataset, ingest id, position
//	NAME/lock                              held by the one ingest of NAME that may commit
//	NAME/manifest.pending, identity.pending  a commit in progress (see PendingManifestKey)
//	NAME/data/INGEST-ID/SSSSSSSS.FF        fragment FF of shard SSSSSSSS
//
// Names are flat (letters, digits, '-', '_', '.'), so NAME/ is a namespace
// no other dataset's name can fall inside. Fragments of an ingest that never
// committed have no manifest naming their INGEST-ID; they are invisible and
// are removed by the next ingest of NAME that holds the lock.
//
// The manifest is chosen by agreement, not by age: the ingest id held by the
// most intact copies wins. When copies of another ingest are present too, the
// winner must also be held by at least Quorum stores. Alone, an ingest's
// copies count as committed unless the stores that provably hold no copy
// (they answer "no such object") leave it short of Quorum even if every
// store that did not answer held one: then its commit was interrupted, and
// the ingest is invisible, as a crashed ingest must be. Each
// store's identity then proves it sits at the position the manifest gives
// it, so a permuted, duplicated or foreign store is recognised before
// anything is read from it as ours, and never written into.
package dataset

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
)

// ErrNotFound: no store holds a manifest for the dataset name.
var ErrNotFound = errors.New("dataset not found")

// ManifestKey is the object key of a dataset's manifest.
func ManifestKey(name string) string { return name + "/manifest" }

// PendingManifestKey and PendingIdentityKey hold a store's manifest copy and
// identity while an ingest commits (see ingest's commit): written to every
// store before any real copy, so a commit killed after its first real copy
// still leaves every store a copy. They count only for an ingest some store
// holds a real copy of; the commit deletes them when it is done.
func PendingManifestKey(name string) string { return name + "/manifest.pending" }

// PendingIdentityKey: see PendingManifestKey.
func PendingIdentityKey(name string) string { return name + "/identity.pending" }

// DataPrefix is the prefix of all fragment objects of a dataset.
func DataPrefix(name string) string { return name + "/data/" }

// FragmentKey names fragment frag of shard in ingest ingestID of dataset name.
func FragmentKey(name, ingestID string, shard, frag int) string {
	return fmt.Sprintf("%s/data/%s/%08d.%02d", name, ingestID, shard, frag)
}

// IndexKey names shard's index in ingest ingestID of dataset name (format
// 2): a copy on every store.
func IndexKey(name, ingestID string, shard int) string {
	return fmt.Sprintf("%s/index/%s/%08d", name, ingestID, shard)
}

// IndexPrefix is the prefix of all shard index objects of a dataset.
func IndexPrefix(name string) string { return name + "/index/" }

// IdentityKey is the object key of a store's identity for dataset name.
func IdentityKey(name string) string { return name + "/identity" }

// LockKey is the object key of the ingest lock of dataset name.
func LockKey(name string) string { return name + "/lock" }

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

// Quorum is how many stores must hold a manifest copy of one ingest for it
// to count as committed: a majority of the k+m stores, but never more than
// k, so that losing m stores never hides a committed dataset.
func Quorum(k, m int) int { return min(k, (k+m)/2+1) }

// Dataset is an opened, committed dataset.
type Dataset struct {
	Name     string
	Manifest *manifest.Manifest
	Stores   []backend.Store
	Reader   *erasure.Reader
	// Places says, per store, what its identity proves; see Place.
	Places []Place
	// Lazy is set when the dataset is in format 2 and was opened with
	// LazyIndexes: Manifest then holds no samples, and Lazy fetches each
	// shard's rows when the shard is first needed.
	Lazy *LazyCatalog
	// LostIndexes lists the shards whose index had no intact copy on any
	// store, when opened with LostIndexesOK (verify and repair): their rows
	// in Manifest are placeholders, never read.
	LostIndexes []int
	log         *slog.Logger

	replacedMu  sync.Mutex // guards replacedAt, replacedErr
	replacedAt  time.Time
	replacedErr error
}

// Options for Open.
type Options struct {
	Logger  *slog.Logger
	Metrics erasure.Metrics
	// LazyIndexes leaves a format-2 dataset's shard indexes on the stores
	// until a shard is first needed (see LazyCatalog); format 1 is always
	// read whole.
	LazyIndexes bool
	// LostIndexesOK opens a format-2 dataset even when some shard's index
	// has no intact copy on any store, listing those shards in LostIndexes,
	// so that verify can name them and repair can mend everything else.
	LostIndexesOK bool
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
	m, err := chooseManifest(copies, stores, name, log)
	if err != nil {
		return nil, err
	}
	var lazy *LazyCatalog
	var lost []int
	if opts.LazyIndexes && m.Top != nil && m.Samples.Len() == 0 {
		if lazy, err = newLazyCatalog(m.Top, stores, log); err != nil {
			return nil, err
		}
		m = lazy.Manifest()
	} else if m, lost, err = loadIndexes(ctx, stores, m, opts.LostIndexesOK); err != nil {
		return nil, err
	}
	if len(stores) != m.Data+m.Parity {
		return nil, fmt.Errorf("dataset %s needs k+m = %d stores (k=%d, m=%d), %d given: pass the same --stores as at ingest, in the same order",
			name, m.Data+m.Parity, m.Data, m.Parity, len(stores))
	}
	places, err := checkPlaces(copies, stores, m)
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
		return FragmentKey(name, m.IngestID, shard, frag)
	}, erasure.ReaderOptions{Metrics: opts.Metrics, Logger: log, Exclude: exclude})
	if err != nil {
		return nil, err
	}
	return &Dataset{Name: name, Manifest: m, Stores: stores, Reader: r, Places: places, Lazy: lazy, LostIndexes: lost, log: log}, nil
}

// LoadManifest reads every store's copy of the manifest and returns the one
// that enough stores agree on (see the package comment).
func LoadManifest(ctx context.Context, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	m, err := LoadHeader(ctx, stores, name, log)
	if err != nil {
		return nil, err
	}
	m, _, err = loadIndexes(ctx, stores, m, false)
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

// loadIndexes completes a format-2 manifest with its shards' indexes, each
// read from the first store whose copy matches the checksum the top-level
// manifest keeps; format 1 manifests are returned as they are. With lostOK,
// a shard whose index has no intact copy gets placeholder rows (one sample
// spanning the shard, zero checksums) and is listed in lost; without it,
// the load fails naming the shard.
func loadIndexes(ctx context.Context, stores []backend.Store, m *manifest.Manifest, lostOK bool) (*manifest.Manifest, []int, error) {
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
	m, err := manifest.Expand(t, idx)
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
	key := IndexKey(t.Name, t.IngestID, si)
	ref := t.Shards[si]
	if ref.IndexSize < 0 || ref.IndexSize > 4<<30 {
		return nil, fmt.Errorf("%w: shard %d's index of %d bytes", manifest.ErrCorrupt, si, ref.IndexSize)
	}
	b := make([]byte, ref.IndexSize)
	if err := s.ReadAt(ctx, key, b, 0); err != nil {
		return nil, err
	}
	if manifest.IndexSum(b) != ref.IndexSum {
		return nil, fmt.Errorf("store %s: %s: %w: checksum mismatch", s, key, manifest.ErrCorrupt)
	}
	return b, nil
}

func readIndex(ctx context.Context, s backend.Store, t *manifest.Top, si int) (*manifest.ShardIndex, error) {
	b, err := ReadIndexBytes(ctx, s, t, si)
	if err != nil {
		return nil, err
	}
	x, err := manifest.DecodeIndex(b, t, si)
	if err != nil {
		return nil, fmt.Errorf("store %s: %s: %w", s, IndexKey(t.Name, t.IngestID, si), err)
	}
	return x, nil
}

// storeCopy is what one store holds of a dataset: its manifest copy and
// identity, and those of a commit in progress (pm, pid).
type storeCopy struct {
	m       *manifest.Manifest
	err     error
	id      *Identity
	idErr   error
	pm      *manifest.Manifest
	pid     *Identity
	pending bool // m or id came from the pending keys (promotePending)
}

// promotePending counts the pending copy and identity of ingest as the
// store's own where its real ones are missing or of another ingest: the
// commit of ingest began (some store holds a real copy of it), and wrote
// the pending ones to every store first.
func promotePending(copies []storeCopy, ingest string) {
	for i := range copies {
		c := &copies[i]
		if c.pm != nil && c.pm.IngestID == ingest && (c.m == nil || c.m.IngestID != ingest) &&
			(c.err == nil || errors.Is(c.err, backend.ErrNotExist) || errors.Is(c.err, manifest.ErrCorrupt)) {
			c.m, c.err, c.pending = c.pm, nil, true
		}
		if c.pid != nil && c.pid.IngestID == ingest && (c.id == nil || c.id.IngestID != ingest) {
			c.id, c.idErr, c.pending = c.pid, nil, true
		}
	}
}

// readCopies reads every store's manifest copy and identity in parallel,
// except those of stores skip names (their copy reads as unavailable).
func readCopies(ctx context.Context, stores []backend.Store, name string, skip ...int) []storeCopy {
	out := make([]storeCopy, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		if slices.Contains(skip, i) {
			out[i].err = &backend.Error{Store: s.String(), Op: "read manifest", Err: fmt.Errorf("%w: did not answer earlier", backend.ErrUnavailable)}
			out[i].idErr = out[i].err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &out[i]
			c.m, c.err = readManifestKey(ctx, s, ManifestKey(name))
			if c.err == nil || errors.Is(c.err, backend.ErrNotExist) || errors.Is(c.err, manifest.ErrCorrupt) {
				c.id, c.idErr = readIdentityKey(ctx, s, name, IdentityKey(name))
				// A commit in progress, or one killed midway.
				c.pm, _ = readManifestKey(ctx, s, PendingManifestKey(name))
				c.pid, _ = readIdentityKey(ctx, s, name, PendingIdentityKey(name))
			} else {
				c.idErr = c.err // the store failed: do not wait on it twice
			}
		}()
	}
	wg.Wait()
	return out
}

// chooseManifest picks the ingest held by the most intact copies; if copies
// of other ingests exist, it must be held by at least Quorum stores. Other
// ingests' copies are reported as foreign.
func chooseManifest(copies []storeCopy, stores []backend.Store, name string, log *slog.Logger) (*manifest.Manifest, error) {
	held := map[string][]int{}
	var ids []string
	var errs []error
	missing := 0
	for i, c := range copies {
		switch {
		case c.err == nil:
			if held[c.m.IngestID] == nil {
				ids = append(ids, c.m.IngestID)
			}
			held[c.m.IngestID] = append(held[c.m.IngestID], i)
		case errors.Is(c.err, backend.ErrNotExist):
			missing++
		default:
			errs = append(errs, fmt.Errorf("store %d: %w", i, c.err))
		}
	}
	if len(ids) == 0 {
		if missing == len(stores) {
			return nil, fmt.Errorf("%w: no store holds %s: check the name and --stores (ingest first with shardfs ingest)", ErrNotFound, ManifestKey(name))
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ManifestKey(name))
		}
		if slices.ContainsFunc(copies, func(c storeCopy) bool { return c.err != nil && unavailable(c.err) }) {
			// Not a verdict on the data: stores that did not answer or
			// refused us may hold intact copies.
			var down []string
			for i, c := range copies {
				if c.err != nil && unavailable(c.err) {
					down = append(down, fmt.Sprintf("store %d (%s)", i, stores[i]))
				}
			}
			return nil, fmt.Errorf("could not read a manifest of %s: %s did not answer in time or refused us; nothing is known to be lost: retry when they answer (or raise --request-timeout on a busy machine): %w",
				name, strings.Join(down, ", "), errors.Join(errs...))
		}
		return nil, fmt.Errorf("no intact manifest of %s on any store: %w", name, errors.Join(errs...))
	}
	sort.SliceStable(ids, func(a, b int) bool { return len(held[ids[a]]) > len(held[ids[b]]) })
	best := ids[0]
	m := copies[held[best][0]].m
	describe := func() string {
		var parts []string
		for _, id := range ids {
			parts = append(parts, fmt.Sprintf("ingest %s on stores %v", id, held[id]))
		}
		return strings.Join(parts, "; ")
	}
	if len(ids) > 1 && len(held[ids[1]]) == len(held[best]) {
		return nil, fmt.Errorf("stores disagree on dataset %s and no ingest has the most copies: %s: pass the stores of one dataset, or re-ingest with --force", name, describe())
	}
	q := Quorum(m.Data, m.Parity)
	if len(ids) > 1 && len(held[best]) < q {
		return nil, fmt.Errorf("stores disagree on dataset %s and no ingest is held by the %d stores needed to trust it over the others (%s): bring the other stores back, pass the stores of one dataset, or re-ingest with --force%s",
			name, q, describe(), joinErrs(errs))
	}
	// Stores that answered "no such object" provably lack a copy; the ones
	// that did not answer, or hold a corrupt copy, may have one. If even
	// counting those the ingest's copies stay below the quorum, its commit
	// never completed (it was killed while writing them): not a dataset.
	if len(ids) == 1 && len(held[best])+len(errs) < q {
		return nil, fmt.Errorf("%w: ingest %s of %s wrote its manifest to %d of %d stores, fewer than the %d a commit needs, and the others answered that they hold none: it did not commit; rerun the ingest",
			ErrNotFound, best, name, len(held[best]), len(stores), q)
	}
	promotePending(copies, best)
	for _, id := range ids[1:] {
		for _, i := range held[id] {
			log.Warn("store holds a manifest of another ingest of this name; the agreeing stores win", "store", i, "name", stores[i].String(), "its_ingest", id, "chosen_ingest", best)
		}
	}
	for _, e := range errs {
		log.Warn("manifest copy unusable; using the agreeing stores' copy", "err", e)
	}
	return m, nil
}

func joinErrs(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	return "; failing: " + errors.Join(errs...).Error()
}

func readManifest(ctx context.Context, s backend.Store, name string) (*manifest.Manifest, error) {
	return readManifestKey(ctx, s, ManifestKey(name))
}

func readManifestKey(ctx context.Context, s backend.Store, key string) (*manifest.Manifest, error) {
	size, err := s.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	if size > 16<<30 {
		return nil, fmt.Errorf("store %s: manifest of %d bytes is implausible", s, size)
	}
	// Chunked, so each request is bounded by the store's per-request timeout
	// however large the manifest is.
	b := make([]byte, size)
	const chunk = 8 << 20
	for off := int64(0); off < size; off += chunk {
		if err := s.ReadAt(ctx, key, b[off:min(size, off+chunk)], off); err != nil {
			return nil, err
		}
	}
	var m *manifest.Manifest
	if manifest.IsTop(b) {
		var t *manifest.Top
		if t, err = manifest.DecodeTop(b); err == nil {
			m = t.Header()
		}
	} else {
		m, err = manifest.Decode(b)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: %s: %w", s, key, err)
	}
	if name, _, _ := strings.Cut(key, "/"); m.Name != name {
		return nil, fmt.Errorf("store %s: %s names dataset %q: %w", s, key, m.Name, manifest.ErrCorrupt)
	}
	return m, nil
}

// Shard returns the erasure view of shard i. A dataset opened with
// LazyIndexes has no block checksums here: its reads go through Lazy.
func (d *Dataset) Shard(i int) *erasure.Shard {
	return &erasure.Shard{ID: i, FragSize: d.Manifest.FragSize(i), Sums: d.Manifest.Shards[i].Sums}
}

// ReadSample returns the bytes of sample i, verified by block checksums and by its own checksum.
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
	out := make([]byte, n)
	if err := d.ReadRangeV(ctx, shard, off, [][]byte{out}); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadRangeV is ReadRange into bufs, which the range's bytes fill in turn:
// the bytes of a range of whole samples go from the stores' responses
// straight into them.
func (d *Dataset) ReadRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	err := d.readRangeV(ctx, shard, off, bufs)
	if err != nil && errors.Is(err, backend.ErrNotExist) {
		if rerr := d.replaced(ctx); rerr != nil {
			return fmt.Errorf("%w (%v)", rerr, err)
		}
	}
	return err
}

// ErrReplaced: the stores now hold another ingest of the dataset than the one opened.
var ErrReplaced = errors.New("dataset was replaced on the stores")

// replaced checks, at most every few seconds, whether the stores now agree
// on another ingest of this dataset (an ingest --force since it was opened),
// which is why its fragments are gone.
func (d *Dataset) replaced(ctx context.Context) error {
	d.replacedMu.Lock()
	defer d.replacedMu.Unlock()
	if d.replacedErr != nil || time.Since(d.replacedAt) < 5*time.Second {
		return d.replacedErr
	}
	d.replacedAt = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := LoadHeader(cctx, d.Stores, d.Name, nil) // the ingest id is enough
	if err == nil && m.IngestID != d.Manifest.IngestID {
		d.replacedErr = fmt.Errorf("%w: dataset %s was replaced (ingest %s was opened; the stores now hold ingest %s): restart the mount to read the new one",
			ErrReplaced, d.Name, d.Manifest.IngestID, m.IngestID)
		d.log.Error(d.replacedErr.Error())
	}
	return d.replacedErr
}

func (d *Dataset) readRangeV(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	n := int64(backend.VecLen(bufs))
	if d.Lazy != nil {
		return d.readRangeLazy(ctx, shard, off, bufs)
	}
	first, last, whole := d.wholeSamples(shard, off, n)
	if !whole {
		return d.Reader.ReadRangeV(ctx, d.Shard(shard), off, bufs)
	}
	s := &d.Manifest.Samples
	return d.Reader.ReadExactV(ctx, d.Shard(shard), off, bufs, func(v [][]byte) bool {
		for i := first; i < last; i++ {
			o := int64(s.Offset[i]) - off
			if erasure.ChecksumV(v, o, o+int64(s.Size[i])) != s.Sum[i] {
				return false
			}
		}
		return true
	})
}

// readRangeLazy is readRangeV with the shard's rows and block checksums
// from its index, fetched if no one holds them.
func (d *Dataset) readRangeLazy(ctx context.Context, shard int, off int64, bufs [][]byte) error {
	sh, r, first, last, whole, err := d.Lazy.readView(ctx, shard, off, int64(backend.VecLen(bufs)))
	if err != nil {
		return err
	}
	if !whole {
		return d.Reader.ReadRangeV(ctx, sh, off, bufs)
	}
	return d.Reader.ReadExactV(ctx, sh, off, bufs, func(v [][]byte) bool {
		for k := first; k < last; k++ {
			o := int64(r.off[k]) - off
			if erasure.ChecksumV(v, o, o+int64(r.size[k])) != r.sum[k] {
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
