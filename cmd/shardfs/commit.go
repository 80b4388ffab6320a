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
the same order, as the parts.`,
		Example: `  shardfs commit --stores http://10.0.0.1:9000/ds,...,http://10.0.0.6:9000/ds imagenet-train`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			copts.Name, copts.Stores, copts.Logger = args[0], stores, g.logger()
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
	return cmd
}
