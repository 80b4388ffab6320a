package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/repository"
)

func newGCCmd(g *globals) *cobra.Command {
	var opts repository.GCOptions
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
			rep, err := repository.GC(cmd.Context(), stores, args[0], opts)
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

func printGC(out io.Writer, name string, rep *repository.GCReport) {
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
