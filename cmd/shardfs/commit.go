package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/ingest"
)

func newCommitCmd(g *globals) *cobra.Command {
	var copts ingest.CommitOptions
	var abandon string
	cmd := &cobra.Command{
		Use:   "commit --stores URL,... NAME",
		Short: "Commit a distributed ingest once all its parts are done",
		Long: `Commit finishes a distributed ingest (shardfs ingest --part I/N ...): it
reads the N part records, checks that together they form one plan and that
every fragment of every shard is on its store at its size, and then writes
the manifest to every store, exactly as a single-process ingest commits.
A commit that finds a part missing names the parts to rerun and changes
nothing. A commit that was stopped (killed, or a store failing) is run
again as it was: before the commit point nothing is visible, and past it
the rerun finishes writing the manifest copies. Pass the same --stores, in
the same order, as the parts.

A distributed ingest that will not be committed (its parts refused, or it
is not wanted) is dropped with --abandon INGEST_ID: its parts' records and
the fragments they wrote are deleted, under the ingest lock. Stop its parts
first. An ingest that a version of the dataset reads is refused, and
nothing committed is touched.`,
		Example: `  shardfs commit --stores http://10.0.0.1:9000/ds,...,http://10.0.0.6:9000/ds imagenet-train
  shardfs commit --stores ... --abandon job-75c924db6a6e00cf imagenet-train`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			copts.Name, copts.Stores, copts.Logger = args[0], stores, g.logger()
			if cmd.Flags().Changed("abandon") {
				if abandon == "" || strings.ContainsAny(abandon, "/ ") {
					return fmt.Errorf("--abandon %q: give the id of the distributed ingest to drop, as commit names it (e.g. job-75c924db6a6e00cf)", abandon)
				}
				if copts.IngestID != "" || copts.Force {
					return fmt.Errorf("--abandon drops an ingest and commits nothing: leave out --ingest-id and --force")
				}
				copts.IngestID = abandon
				rep, err := ingest.Abandon(cmd.Context(), copts)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "abandoned ingest %s of %s: deleted %d part objects and %d fragment and index objects; nothing committed was touched\n",
					abandon, args[0], rep.PartObjects, rep.DataObjects)
				return nil
			}
			res, err := ingest.Commit(cmd.Context(), copts)
			if errors.Is(err, ingest.ErrAlreadyCommitted) {
				fmt.Fprintln(cmd.OutOrStdout(), err)
				return nil
			}
			if err != nil {
				return err
			}
			if m := res.Manifest; len(m.Versions) > 0 && strings.HasPrefix(m.Versions[len(m.Versions)-1].Change, "append") {
				v := m.Versions[len(m.Versions)-1]
				fmt.Fprintf(cmd.OutOrStdout(), "committed version %d of %s (after version %d): appended %d samples in %d new shards; every fragment checked\n",
					v.Number, args[0], v.Parent, res.Samples, m.Segments[len(m.Segments)-1].Shards)
				return nil
			}
			printCommitted(cmd.OutOrStdout(), args[0], res, len(stores), false)
			return nil
		},
	}
	cmd.Flags().StringVar(&copts.IngestID, "ingest-id", "", "the distributed ingest to commit, when the stores hold finished parts of several")
	cmd.Flags().BoolVar(&copts.Force, "force", false, "replace an existing dataset of the same name")
	cmd.Flags().StringVar(&abandon, "abandon", "", "drop the distributed ingest `INGEST_ID`, one that will not be committed: delete its parts' records and the fragments they wrote (stop its parts first)")
	return cmd
}
