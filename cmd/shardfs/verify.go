package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/dataset"
)

// Exit codes of verify and repair.
const (
	exitDamaged       = 1 // damage found, repair can fix it
	exitUnrecoverable = 2 // more than m fragments of some shard lost
)

func newVerifyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify --stores URL,... NAME",
		Short: "Read every fragment and check every checksum",
		Long: `Verify reads every fragment of every shard, checks every block checksum,
decodes every shard and checks every sample checksum, and checks each store's
manifest copy. It reports each missing or corrupt fragment by shard,
fragment and store, and whether the data is still recoverable.

Exit status: 0 intact; 1 damaged but recoverable (run shardfs repair);
2 unrecoverable (some shard lost more than m fragments), or any other error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			_, err = runVerify(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, args[0])
			return err
		},
	}
}

func runVerify(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, name string) (*dataset.Report, error) {
	ds, err := dataset.Open(ctx, stores, name, dataset.Options{Logger: log})
	if err != nil {
		return nil, &exitError{exitUnrecoverable, err}
	}
	rep, bar, err := verifyWithProgress(ctx, ds)
	bar.Finish()
	if err != nil {
		return nil, &exitError{exitUnrecoverable, err}
	}
	printReport(out, ds, rep)
	switch {
	case rep.Intact():
		return rep, nil
	case rep.Recoverable():
		return rep, &exitError{exitDamaged, fmt.Errorf("%s is damaged but recoverable: run shardfs repair %s", name, name)}
	default:
		return rep, &exitError{exitUnrecoverable, fmt.Errorf("%s is unrecoverable: shards %v lost more than m=%d fragments", name, rep.Unrecoverable, ds.Manifest.Parity)}
	}
}

func verifyWithProgress(ctx context.Context, ds *dataset.Dataset) (*dataset.Report, *progress, error) {
	m := ds.Manifest
	var total int64
	for i := range m.Shards {
		total += m.FragSize(i) * int64(m.Data+m.Parity)
	}
	bar := newProgress("verify "+ds.Name, total)
	rep, err := ds.Verify(ctx, bar.Add)
	return rep, bar, err
}

func printReport(out io.Writer, ds *dataset.Dataset, rep *dataset.Report) {
	m := ds.Manifest
	fmt.Fprintf(out, "dataset %s: %d samples, %d shards, %d fragments, RS(%d,%d), %s read\n",
		ds.Name, m.Samples.Len(), rep.Shards, rep.Fragments, m.Data, m.Parity, humanize.IBytes(uint64(rep.Bytes)))
	unrec := map[int]bool{}
	for _, s := range rep.Unrecoverable {
		unrec[s] = true
	}
	for _, d := range rep.Damaged {
		state := "recoverable"
		if unrec[d.Shard] {
			state = "UNRECOVERABLE"
		}
		fmt.Fprintf(out, "  damaged: shard %d fragment %d on store %d (%s): %v [%s]\n", d.Shard, d.Frag, d.Store, d.StoreName, d.Err, state)
	}
	for _, k := range rep.BadSamples {
		fmt.Fprintf(out, "  bad sample checksum: %s\n", k)
	}
	for _, i := range rep.BadManifests {
		fmt.Fprintf(out, "  manifest copy missing or corrupt on store %d (%s)\n", i, ds.Stores[i])
	}
	switch {
	case rep.Intact():
		fmt.Fprintln(out, "OK: every fragment, block and sample checksum verified")
	case rep.Recoverable():
		fmt.Fprintf(out, "DAMAGED: %d fragments, %d manifest copies; all recoverable\n", len(rep.Damaged), len(rep.BadManifests))
	default:
		fmt.Fprintf(out, "UNRECOVERABLE: shards %v\n", rep.Unrecoverable)
	}
}

func newRepairCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "repair --stores URL,... NAME",
		Short: "Rebuild lost or corrupt fragments from the survivors",
		Long: `Repair verifies the dataset, then rebuilds every missing or corrupt fragment
from the surviving ones and writes it back, and rewrites missing or corrupt
manifest copies. A store replaced by an empty one is refilled this way.
If any shard lost more than m fragments, repair writes nothing and exits 2.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			return runRepair(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, args[0])
		},
	}
}

func runRepair(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, name string) error {
	ds, err := dataset.Open(ctx, stores, name, dataset.Options{Logger: log})
	if err != nil {
		return &exitError{exitUnrecoverable, err}
	}
	rep, bar, err := verifyWithProgress(ctx, ds)
	bar.Finish()
	if err != nil {
		return &exitError{exitUnrecoverable, err}
	}
	printReport(out, ds, rep)
	if rep.Intact() {
		fmt.Fprintln(out, "nothing to repair")
		return nil
	}
	var total int64
	for _, d := range rep.Damaged {
		total += ds.Manifest.FragSize(d.Shard)
	}
	rbar := newProgress("repair "+name, total)
	n, err := ds.Repair(ctx, rep, rbar.Add)
	rbar.Finish()
	if err != nil {
		return &exitError{exitUnrecoverable, err}
	}
	fmt.Fprintf(out, "repaired %s: wrote %d objects; run shardfs verify %s to confirm\n", name, n, name)
	return nil
}
