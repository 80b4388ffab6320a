package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

func newRepairCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "repair --stores URL,... NAME",
		Short: "Rebuild lost or corrupt fragments from the survivors",
		Long: `Repair verifies the dataset, then rebuilds every missing or corrupt fragment
from the surviving ones and writes it back, and rewrites missing or corrupt
manifest copies, index and group object copies, kept versions' manifests
and store identities. A store replaced by an empty one is refilled this way.

Repair proves every write safe before it makes one: a rebuilt fragment is
decoded from blocks that verified, and nothing is written to a store that
did not answer. It mends what can be mended with the stores that answer:
shards that lost more than m blocks of one stripe, or every copy of their
index, are left as they are and named (exit 2); stores that did not answer
or refused us are named with the cause (exit 3). It writes nothing at all
when the stores are out of order, or when a store holds another dataset of
this name, unless --force says to overwrite that store.`,
		Example: `  shardfs repair imagenet-train                 # after replacing a failed store with an empty one
  shardfs repair --force imagenet-train         # also overwrite a store that holds another dataset of this name`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			return runRepair(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, args[0], force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "also overwrite stores that hold another dataset of this name")
	return cmd
}

func runRepair(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, name string, force bool) error {
	ds, err := repository.Open(ctx, stores, name, repository.Options{Logger: log, LostIndexesOK: true})
	if err != nil {
		return notChecked(err)
	}
	rep, bar, err := verifyWithProgress(ctx, ds)
	bar.Finish()
	if err != nil {
		return notChecked(err)
	}
	printReport(out, ds, rep)
	switch {
	case rep.Intact() && len(rep.Pending) == 0 && rep.Recoverable():
		fmt.Fprintln(out, "nothing to repair")
		return nil
	case rep.Intact() && len(rep.Pending) == 0:
		// Nothing repair can write, and something lost: say so (exit 2).
		return &exitError{exitUnrecoverable, fmt.Errorf("%s is unrecoverable: %s", name, unrecoverableShards(ds, rep))}
	}
	var total int64
	for _, d := range rep.Damaged {
		total += ds.Manifest.FragSize(d.Shard)
	}
	rbar := newProgress("repair "+name, total)
	n, err := ds.Repair(ctx, rep, force, rbar.Add)
	rbar.Finish()
	if n > 0 || err == nil {
		fmt.Fprintf(out, "repaired %s: wrote %d objects; run shardfs verify %s to confirm\n", name, n, name)
	}
	switch {
	case errors.Is(err, repository.ErrIncomplete):
		return notChecked(err)
	case errors.Is(err, repository.ErrForeignStore):
		return &exitError{exitDamaged, err}
	case err != nil:
		return &exitError{exitUnrecoverable, err}
	}
	return nil
}
