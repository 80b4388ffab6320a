package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
	"github.com/shardfs/shardfs/synthetic"
)

// describeSynthetic writes the format-3 description of the synthetic
// dataset (counts[c] samples of stratum c spread evenly over shards
// shards) to the file store in dir: its root, and a group object per
// DefaultGroupShards shards. Only sizes and counts: no sample, no index.
// A dir that already holds the same description is read, not rewritten,
// so that a second run measures a rank's start alone (found, from
// findDescription).
func describeSynthetic(ctx context.Context, out io.Writer, dir string, h manifest.Header, counts []int, shards int, found *backend.Local) (*backend.Local, error) {
	if found != nil {
		fmt.Fprintf(out, "description: found in %s, not rewritten\n", dir)
		return found, nil
	}
	st, err := backend.NewLocal(dir)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var groupBytes int64
	root, err := synthetic.Describe(h, counts, shards, func(g int, b []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		groupBytes += int64(len(b))
		return repository.Put(ctx, st, repository.GroupObject(h.Name, h.IngestID, g), b)
	})
	if err != nil {
		return nil, err
	}
	enc, err := manifest.EncodeRoot(root)
	if err != nil {
		return nil, err
	}
	if err := repository.Put(ctx, st, repository.ManifestObject(h.Name), enc); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "description: written to %s in %s: root of %d bytes (what every node reads: %.2f bytes a shard), %d group objects of %s in all\n",
		dir, time.Since(t0).Round(time.Millisecond), len(enc), float64(len(enc))/float64(shards), len(root.Groups), mib(groupBytes))
	return st, nil
}

// findDescription checks --describe's dir before any work is done (the
// orders of a 30,000,000-sample plan took 15 s before a refusal came): an
// empty or new directory is nil, to be written; one that holds this
// description is its store, only to be read; anything else is refused,
// naming the fix, and left as it is.
func findDescription(ctx context.Context, dir string, h manifest.Header, counts []int, shards int) (*backend.Local, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(ents) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--describe %s: %w", dir, err)
	}
	st, err := backend.NewLocal(dir)
	if err != nil {
		return nil, err
	}
	root, _, err := readRoot(ctx, st, h.Name)
	if errors.Is(err, backend.ErrNotExist) {
		return nil, fmt.Errorf("--describe %s: the directory is not empty and holds no synthetic description: give an empty or new directory", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("--describe %s: %w: give an empty or new directory", dir, err)
	}
	var n int64
	for _, c := range counts {
		n += int64(c)
	}
	if root.Samples() != n || root.NumShards() != shards || len(root.Strata) != len(counts) {
		return nil, fmt.Errorf("--describe %s holds a description of %d samples in %d shards and %d strata, not of this one (%d, %d, %d): give an empty or new directory",
			dir, root.Samples(), root.NumShards(), len(root.Strata), n, shards, len(counts))
	}
	return st, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// rankStart is what a rank of a format-3 dataset does before it serves,
// through the mount's own catalog (repository.NewRootCatalog): read and check
// the root, compute its order from the root's counts, and number every
// sample of its epoch as the catalog does, shard by shard, through the
// group objects that hold them. That numbering is checked against the
// even model's order, which numbers samples shard by shard itself. A
// rank-affine order (version 3) reads the group objects of its range of
// samples only, and is numbered as the catalog numbers samples already.
func rankStart(ctx context.Context, out io.Writer, st backend.Store, h manifest.Header, even *layout.Input, p layout.Params) error {
	t0 := time.Now()
	root, size, err := readRoot(ctx, st, h.Name)
	if err != nil {
		return err
	}
	cat, err := repository.NewRootCatalog(root, []backend.Store{st}, nil)
	if err != nil {
		return err
	}
	in, err := repository.RootInput(root)
	if err != nil {
		return err
	}
	tRoot := time.Since(t0)
	if p.Affinity {
		in.SetShardRuns(cat.ShardRuns)
	}
	o, err := layout.Order(in, p)
	if err != nil {
		return err
	}
	tOrder := time.Since(t0) - tRoot
	ids := o.Samples
	if !p.Affinity {
		if ids, err = cat.Number(ctx, o.Samples); err != nil {
			return err
		}
	}
	tLocate := time.Since(t0) - tRoot - tOrder
	held, _ := cat.GroupsHeld()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Fprintf(out, "rank %d's start: root of %d bytes and %d shards read and checked in %s, order of %d samples in %s, every sample located through %d group objects in %s (the shards of %d groups held); %s in all, max RSS %d MiB\n",
		p.Rank, size, root.NumShards(), tRoot.Round(time.Millisecond), o.Samples.Len(), tOrder.Round(time.Millisecond), cat.GroupLoads(), tLocate.Round(time.Millisecond),
		held, time.Since(t0).Round(time.Millisecond), ru.Maxrss>>10)
	want, err := layout.Order(even, p)
	if err != nil {
		return err
	}
	if want.Samples.Len() != ids.Len() {
		return fmt.Errorf("the root's order has %d samples, the even model's %d", ids.Len(), want.Samples.Len())
	}
	bad := 0
	for i, x := range want.Samples.All() {
		if ids.At(i) != x {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d samples located away from where the even model places them", bad, ids.Len())
	}
	fmt.Fprintf(out, "every one of the %d samples is where the even model places it\n", ids.Len())
	return nil
}

// readRoot reads and checks the root of a description (the dataset's
// manifest key on the one store that holds it), and its size in bytes.
// repository.LoadHeader is for a dataset's k+m stores and their quorum.
func readRoot(ctx context.Context, st backend.Store, name string) (*manifest.Root, int64, error) {
	b, err := repository.ReadWhole(ctx, st, repository.ManifestObject(name))
	if err != nil {
		return nil, 0, err
	}
	root, err := manifest.DecodeRoot(b)
	return root, int64(len(b)), err
}
