package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/cache"
	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/metrics"
	"github.com/shardfs/shardfs/prefetch"
	"github.com/shardfs/shardfs/repository"
)

type warmFlags struct {
	order        orderFlags
	cacheDir     string
	cacheDirSize string
	epoch        int
	batches      int
}

func newWarmCmd(g *globals) *cobra.Command {
	f := &warmFlags{}
	cmd := &cobra.Command{
		Use:   "warm --stores URL,... --cache-dir DIR [order flags] NAME",
		Short: "Fill the disk tier with exactly what a set of ranks will read",
		Long: `Warm computes the order the mount will serve and fetches into the disk tier
(--cache-dir) exactly the samples the given ranks read: the first --batches
batches (0: all) of --epochs epochs starting at --epoch. Samples the tier
already holds are skipped, so warm can be rerun or interrupted (Ctrl-C)
at any moment. Run it before training starts, or for the next epoch while
this one trains; mounts with the same --cache-dir then read from local disk.

The order flags must match the mount's (--seed, --world-size, --batch-size,
--rank, --alpha, --window, --tail, --epoch-size).`,
		Example: `  shardfs warm --stores $SHARDFS_STORES --cache-dir /nvme/shardfs --rank 8-15 --world-size 64 --batch-size 256 --seed 17 imagenet-train
  shardfs warm --stores $SHARDFS_STORES --cache-dir /nvme/shardfs --epoch 1 --batches 100 --rank 3 --world-size 8 --seed 17 imagenet-train`,
		Args: func(cmd *cobra.Command, args []string) error {
			if f.order.mix != "" {
				return fmt.Errorf("warm does not take --mix: a mount with --mix fills its own disk tier as it reads")
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			return runWarm(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, args[0], f)
		},
	}
	f.order.register(cmd.Flags(), orderDefaults{rank: "all", rankHelp: "the ranks whose samples to fetch (the mount's --rank)",
		epochs: 1, epochsHelp: "number of epochs to warm, starting at --epoch"})
	fl := cmd.Flags()
	fl.MarkHidden("mix")
	fl.StringVar(&f.cacheDir, "cache-dir", "", "the disk tier to fill (the mount's --cache-dir)")
	fl.StringVar(&f.cacheDirSize, "cache-dir-size", "100GiB", "most bytes the disk tier holds (the mount's --cache-dir-size)")
	fl.IntVar(&f.epoch, "epoch", 0, "first epoch to warm")
	fl.IntVar(&f.batches, "batches", 0, "batches per rank-epoch to warm, from the first (0: all)")
	return cmd
}

func runWarm(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, name string, f *warmFlags) error {
	if f.cacheDir == "" {
		return errors.New("warm needs --cache-dir: the disk tier to fill")
	}
	if f.order.epochs < 1 {
		return fmt.Errorf("--epochs %d: warm fetches a finite number of epochs: pass 1 or more", f.order.epochs)
	}
	if f.epoch < 0 || f.batches < 0 {
		return fmt.Errorf("--epoch %d --batches %d: must not be negative", f.epoch, f.batches)
	}
	size, err := humanize.ParseBytes(f.cacheDirSize)
	if err != nil {
		return fmt.Errorf("--cache-dir-size %q: use a size such as 200GiB", f.cacheDirSize)
	}
	ds, err := repository.Open(ctx, stores, name, repository.Options{Logger: log})
	if err != nil {
		return err
	}
	f.order.firstEpoch = f.epoch
	spec, err := f.order.spec()
	if err != nil {
		return err
	}
	if err := f.order.bindFeedback(&ds.Manifest.Header, stores, name); err != nil {
		return err
	}
	plan, err := repository.PlanOrder(ds, spec)
	if err != nil {
		return err
	}
	in := plan.Input
	var samples []int64
	for e := f.epoch; e < f.epoch+f.order.epochs; e++ {
		for _, r := range f.order.ranks() {
			p, err := f.order.params(e, r)
			if err != nil {
				return err
			}
			o, err := layout.Order(in, p)
			if err != nil {
				return err
			}
			n := o.Batches
			if f.batches > 0 {
				n = min(n, f.batches)
			}
			samples = append(samples, o.Samples.Slice(0, n*p.Batch).Int64s()...)
		}
	}
	var total int64
	cat := repository.ManifestCatalog{M: ds.Manifest}
	seen := map[int64]bool{}
	for _, s := range samples {
		if !seen[s] {
			seen[s] = true
			total += cat.Size(int(s))
		}
	}
	disk, err := cache.OpenDisk(f.cacheDir, repository.DiskNamespace(&ds.Manifest.Header), int64(size))
	if err == nil {
		disk.SetShardNamespace(repository.ShardNamespace(&ds.Manifest.Header)) // as the mount reads it
	}
	if err != nil {
		return err
	}
	defer disk.Close()
	if total > int64(size) {
		log.Warn("what the ranks read is larger than the disk tier: the earliest samples will be evicted by the latest",
			"read", humanize.IBytes(uint64(total)), "cache_dir_size", humanize.IBytes(size))
	}
	cfg := prefetch.DefaultConfig()
	cfg.Disk = disk
	cfg.Disabled = true
	r := prefetch.New(ds, cat, cache.New(16<<20, nil), metrics.New(make([]string, len(stores))), cfg, log)
	defer r.Close()
	bar := newProgress("warm "+name, total)
	err = r.Warm(ctx, samples, bar.Add)
	bar.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("warm interrupted: %d of %d samples fetched are kept; rerun the same command to go on", disk.Writes.Load(), len(seen))
		}
		return err
	}
	fmt.Fprintf(out, "warmed %s: %d samples, %s for %d rank(s) over %d epoch(s): %d fetched (%s), %d already on disk\n",
		name, len(seen), humanize.IBytes(uint64(total)), len(f.order.ranks()), f.order.epochs,
		disk.Writes.Load(), humanize.IBytes(uint64(disk.WriteBytes.Load())), len(seen)-int(disk.Writes.Load()))
	// The tier holds samples, not an order: say which mount reads what was
	// warmed, so that a mistyped flag does not pass unnoticed.
	fmt.Fprintf(out, "  these are the samples that epochs %d..%d of ranks %s read with --seed %d --world-size %d --batch-size %d --alpha %v --window %d --tail %s%s; a mount with other order flags reads other samples\n",
		f.epoch, f.epoch+f.order.epochs-1, f.order.rank, f.order.seed, f.order.world, f.order.batch, f.order.alpha, f.order.window, f.order.tail,
		map[bool]string{true: " --affinity", false: ""}[f.order.affinity])
	return nil
}
