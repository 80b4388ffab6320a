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
	what := "their kept manifests"
	if len(rep.Ingests) > 0 {
		what = "with the objects of ingests " + strings.Join(rep.Ingests, ", ")
	}
	fmt.Fprintf(out, "%s versions %v of %s: %d objects, %s (%s)\n", verb, rep.Removed, name, rep.Objects,
		humanize.IBytes(uint64(rep.Bytes)), what)
	if !rep.Deleted {
		fmt.Fprintln(out, "dry run: nothing was deleted; pass --yes to delete")
	}
}
