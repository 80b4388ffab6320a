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
	"github.com/shardfs/shardfs/mount"
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
	f.order.firstEpoch = f.epoch
	spec, err := f.order.spec()
	if err != nil {
		return err
	}
	var bar *progress
	res, err := mount.Warm(ctx, mount.WarmConfig{Stores: stores, Name: name, Spec: spec, Run: f.order.run,
		First: f.epoch, Epochs: f.order.epochs, Ranks: f.order.ranks(), Batches: f.batches,
		CacheDir: f.cacheDir, CacheDirSize: int64(size), Log: log,
		Progress: func(total int64) func(int64) {
			bar = newProgress("warm "+name, total)
			return bar.Add
		}})
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		if ctx.Err() != nil && res != nil {
			return fmt.Errorf("warm interrupted: %d of %d samples fetched are kept; rerun the same command to go on", res.Fetched, res.Samples)
		}
		return err
	}
	fmt.Fprintf(out, "warmed %s: %d samples, %s for %d rank(s) over %d epoch(s): %d fetched (%s), %d already on disk\n",
		name, res.Samples, humanize.IBytes(uint64(res.Bytes)), len(f.order.ranks()), f.order.epochs,
		res.Fetched, humanize.IBytes(uint64(res.FetchedBytes)), res.Samples-int(res.Fetched))
	// The tier holds samples, not an order: say which mount reads what was
	// warmed, so that a mistyped flag does not pass unnoticed.
	fmt.Fprintf(out, "  these are the samples that epochs %d..%d of ranks %s read with --seed %d --world-size %d --batch-size %d --alpha %v --window %d --tail %s%s; a mount with other order flags reads other samples\n",
		f.epoch, f.epoch+f.order.epochs-1, f.order.rank, f.order.seed, f.order.world, f.order.batch, f.order.alpha, spec.Base.Window, f.order.tail,
		map[bool]string{true: " --affinity", false: ""}[f.order.affinity])
	return nil
}
