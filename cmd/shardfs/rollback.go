package main

import (
	"errors"
	"fmt"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/ingest"
)

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
