package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/dataset"
	"github.com/shardfs/shardfs/ingest"
)

func newVersionsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "versions --stores URL,... NAME",
		Short: "List a dataset's versions: number, parent, time, samples, bytes, what changed",
		Long: `Versions lists every version of dataset NAME, oldest first. Every commit
makes one: the first ingest, each ingest --append, each rollback, each
ingest --force that replaces the dataset. The current version is the one a
mount reads by default; shardfs mount --version N reads another, and
shardfs rollback NAME --to N makes N's content current again.

STATE is current, kept (mountable), or removed (shardfs gc deleted it).`,
		Example: `  shardfs versions --stores file:///srv/s0,file:///srv/s1,file:///srv/s2 train`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			return runVersions(cmd.Context(), cmd.OutOrStdout(), stores, args[0])
		},
	}
}

func runVersions(ctx context.Context, out io.Writer, stores []backend.Store, name string) error {
	if err := dataset.CheckName(name); err != nil {
		return err
	}
	cur, err := dataset.LoadHeader(ctx, stores, name, nil)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tPARENT\tCREATED\tSAMPLES\tBYTES\tSTATE\tCHANGE")
	for _, v := range dataset.History(cur) {
		state := "kept"
		if v.IngestID == cur.IngestID {
			state = "current"
		} else if !anyHolds(ctx, stores, dataset.VersionKey(name, v.IngestID)) {
			state = "removed"
		}
		parent := "-"
		if v.Parent > 0 {
			parent = fmt.Sprint(v.Parent)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", v.Number, parent, time.Unix(v.CreatedUnix, 0).UTC().Format(time.RFC3339),
			v.Samples, humanize.IBytes(uint64(v.Bytes)), state, v.Change)
	}
	return tw.Flush()
}

// anyHolds reports whether some store holds key.
func anyHolds(ctx context.Context, stores []backend.Store, key string) bool {
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		_, err := s.Stat(ctx, key)
		return err
	})
	ok, _ := backend.Split(errs)
	return len(ok) > 0
}

func newRollbackCmd(g *globals) *cobra.Command {
	var to int
	cmd := &cobra.Command{
		Use:   "rollback --stores URL,... NAME --to N",
		Short: "Make an earlier version's content current again, as a new version",
		Long: `Rollback makes the content of version N of dataset NAME current again. It
does not delete anything: it commits a new version whose shards and samples
are N's, read from the objects N reads, so nothing is uploaded, and the
rollback can itself be rolled back (to the version it replaced). Running
mounts keep the version they opened; new mounts read the rollback.`,
		Example: `  shardfs rollback --stores ... train --to 2
  shardfs versions --stores ... train`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 1 {
				return fmt.Errorf("--to: name the version to roll back to (shardfs versions %s lists them)", args[0])
			}
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			res, err := ingest.Rollback(cmd.Context(), ingest.Options{Name: args[0], Stores: stores, Logger: g.logger()}, to)
			if errors.Is(err, ingest.ErrNothingToDo) {
				fmt.Fprintln(cmd.OutOrStdout(), err)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "committed version %d of %s: the content of version %d (%d samples, %s), after version %d\n",
				res.Version, args[0], to, res.Samples, humanize.IBytes(uint64(res.Bytes)), res.Parent)
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "the version whose content becomes current")
	return cmd
}

func newGCCmd(g *globals) *cobra.Command {
	var opts dataset.GCOptions
	cmd := &cobra.Command{
		Use:   "gc --stores URL,... NAME --keep-last K | --keep-within DURATION [--yes]",
		Short: "Delete the versions no retention rule keeps, and the objects only they read",
		Long: `Gc removes the versions of dataset NAME that no rule keeps, and deletes every
object that no kept version reads. It keeps:
  - the current version, always;
  - the last K versions (--keep-last K; the current one counts);
  - the versions committed within DURATION (--keep-within 720h);
  - every version a running mount serves: mounts keep a lease on the stores,
    refreshed every minute, and gc honours a lease until it is 15 minutes
    stale (at once, on this host, when the mount's process is gone);
  - the objects of an ingest or append in progress (gc takes the ingest
    lock; a distributed ingest's parts are left alone until it commits).
At least one rule is needed. Without --yes, gc only says what it would
delete. Killed at any moment, it leaves every kept version whole: it deletes
the removed versions' manifests first, then the objects only they read.`,
		Example: `  shardfs gc --stores ... train --keep-last 2          # what would go
  shardfs gc --stores ... train --keep-last 2 --yes    # delete it
  shardfs gc --stores ... train --keep-within 720h --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.KeepLast < 0 || opts.KeepWithin < 0 {
				return fmt.Errorf("--keep-last and --keep-within cannot be negative")
			}
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			opts.Logger = g.logger()
			rep, err := dataset.GC(cmd.Context(), stores, args[0], opts)
			if err != nil {
				return err
			}
			printGC(cmd.OutOrStdout(), args[0], rep)
			return nil
		},
	}
	cmd.Flags().IntVar(&opts.KeepLast, "keep-last", 0, "keep the last K versions (the current one counts)")
	cmd.Flags().DurationVar(&opts.KeepWithin, "keep-within", 0, "keep the versions committed within this long, e.g. 720h")
	cmd.Flags().BoolVar(&opts.Delete, "yes", false, "delete; without it gc only says what it would delete")
	return cmd
}

func printGC(out io.Writer, name string, rep *dataset.GCReport) {
	for _, k := range rep.Kept {
		fmt.Fprintf(out, "keep version %d: %s\n", k.Number, k.Why)
	}
	verb := "would remove"
	if rep.Deleted {
		verb = "removed"
	}
	if len(rep.Removed) == 0 && rep.Objects == 0 {
		fmt.Fprintf(out, "nothing to remove from %s\n", name)
		return
	}
	fmt.Fprintf(out, "%s versions %v of %s: %d objects, %s\n", verb, rep.Removed, name, rep.Objects, humanize.IBytes(uint64(rep.Bytes)))
	if len(rep.Ingests) > 0 {
		fmt.Fprintf(out, "  with the data of ingests %s, which no kept version reads\n", strings.Join(rep.Ingests, ", "))
	}
	if !rep.Deleted {
		fmt.Fprintln(out, "dry run: nothing was deleted; pass --yes to delete")
	}
}

func newMigrateCmd(g *globals) *cobra.Command {
	var opts ingest.MigrateOptions
	var to string
	cmd := &cobra.Command{
		Use:   "migrate --stores OLD,... NAME --to-stores NEW,... [--data K --parity M]",
		Short: "Copy a dataset and its versions to other stores, re-encoded if asked, while mounts read on",
		Long: `Migrate copies dataset NAME, every version it keeps, from its stores (--stores)
to other stores (--to-stores), re-encoded in another erasure code if asked
(--data, --parity, --block-size; by default the dataset's). It only reads the
old stores: mounts of them read on throughout, and keep working after, so
the old set is the rollback until you remove it (shardfs gc on it, or by
hand). Every shard is read verified from the old stores (decoding around a
failed one), re-encoded, written, and read back before anything is
committed; memory holds a few shards at a time, whatever the dataset's size.
On the new stores the dataset gets the same versions, and one more: the
migration, whose content is the current version's.

Killed at any moment, nothing is committed on the new stores; the same
command again checks what was written, writes the rest, and commits. The new
stores must hold no other dataset of this name.`,
		Example: `  shardfs migrate --stores http://old-{0..5}:9000/b/ds train \
    --to-stores http://new-0:9000/b/ds,...,http://new-10:9000/b/ds --data 8 --parity 3
  shardfs mount --stores http://new-0:9000/b/ds,... train /mnt/train`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return fmt.Errorf("--to-stores: name the stores to migrate to, k+m URLs")
			}
			from, err := g.openStores()
			if err != nil {
				return err
			}
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			if opts.To, err = g.openURLs(cfg, strings.Split(to, ",")); err != nil {
				return fmt.Errorf("--to-stores: %w", err)
			}
			if err := createBuckets(cmd.Context(), cmd.OutOrStdout(), opts.To); err != nil {
				return err
			}
			opts.Name, opts.From, opts.Logger = args[0], from, g.logger()
			res, err := ingest.Migrate(cmd.Context(), opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if res.Unchanged {
				fmt.Fprintf(out, "%s is migrated already: the new stores hold it, version %d: nothing to do\n", args[0], res.Version)
				return nil
			}
			fmt.Fprintf(out, "migrated %s from %s to %s: versions %v copied, version %d committed on the new stores\n",
				args[0], res.From, res.To, res.Versions, res.Version)
			fmt.Fprintf(out, "  %d shards, %s of samples, %s of fragments written and read back (%d found intact from an earlier run), %s\n",
				res.Shards, humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.Written)), res.Reused, res.Elapsed.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to-stores", "", "the stores to migrate to, k+m URLs (credentials as for --stores)")
	cmd.Flags().IntVar(&opts.Data, "data", 0, "data fragments per shard on the new stores (default: the dataset's)")
	cmd.Flags().IntVar(&opts.Parity, "parity", 0, "parity fragments per shard on the new stores (default: the dataset's)")
	cmd.Flags().IntVar(&opts.BlockSize, "block-size", 0, "checksum block size in bytes on the new stores (default: the dataset's)")
	return cmd
}
