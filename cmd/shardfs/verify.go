package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/dataset"
)

// Exit codes of verify and repair.
const (
	exitDamaged       = 1 // damage found, repair can fix it
	exitUnrecoverable = 2 // some block stripe lost more than m blocks
	exitNotChecked    = 3 // could not check: a store did not answer, wrong stores or order, cancelled, not found
)

// notChecked wraps err as "could not check" (exit 3).
func notChecked(err error) error {
	if errors.Is(err, context.Canceled) {
		err = fmt.Errorf("interrupted before the check finished: nothing is known about the dataset's state: %w", err)
	}
	return &exitError{exitNotChecked, fmt.Errorf("could not check: %w", err)}
}

func newVerifyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify --stores URL,... NAME",
		Short: "Read every fragment and check every checksum",
		Long: `Verify reads every fragment of every shard, checks every block checksum,
decodes every shard and checks every sample checksum, and checks each store's
manifest copy. It reports each missing or corrupt fragment by shard,
fragment and store, and whether the data is still recoverable.

A store that does not answer is asked once, not once per fragment; its
fragments are reported as not checked. Stores are checked against the
identities written at ingest: a store list out of order is refused with
the order to pass, and a store holding another dataset of this name is named.

Exit status: 0 intact; 1 damaged but recoverable (run shardfs repair);
2 unrecoverable (some block stripe lost more than m blocks);
3 could not check (a store did not answer, the stores are wrong or out of
order, the dataset was not found, or the run was interrupted).`,
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
		return nil, notChecked(err)
	}
	rep, bar, err := verifyWithProgress(ctx, ds)
	bar.Finish()
	if err != nil {
		return nil, notChecked(err)
	}
	printReport(out, ds, rep)
	switch {
	case !rep.Recoverable():
		return rep, &exitError{exitUnrecoverable, fmt.Errorf("%s is unrecoverable: shards %v lost more than m=%d blocks of one stripe", name, rep.Unrecoverable, ds.Manifest.Parity)}
	case !rep.Complete():
		return rep, notChecked(fmt.Errorf("stores %s did not answer: %d fragments not checked; run verify again when they are back", storeList(ds, rep.Unreachable), rep.Unchecked))
	case rep.Intact():
		return rep, nil
	default:
		return rep, &exitError{exitDamaged, fmt.Errorf("%s is damaged but recoverable: run shardfs repair %s", name, name)}
	}
}

func storeList(ds *dataset.Dataset, idx []int) string {
	var parts []string
	for _, i := range idx {
		parts = append(parts, fmt.Sprintf("%d (%s)", i, ds.Stores[i]))
	}
	return strings.Join(parts, ", ")
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
	for _, ic := range rep.BadIndexes {
		fmt.Fprintf(out, "  shard %d's index copy missing or corrupt on store %d (%s): %v\n", ic.Shard, ic.Store, ds.Stores[ic.Store], ic.Err)
	}
	for _, i := range rep.NoIdentity {
		fmt.Fprintf(out, "  no identity on store %d (%s): a new or replaced store\n", i, ds.Stores[i])
	}
	for _, i := range rep.Pending {
		fmt.Fprintf(out, "  note: store %d (%s) holds this ingest's manifest or identity under the pending keys of an interrupted commit; the dataset is whole, repair moves them\n", i, ds.Stores[i])
	}
	for _, i := range rep.Foreign {
		fmt.Fprintf(out, "  FOREIGN: store %d (%s) holds %s of this name; repair writes into it only with --force\n", i, ds.Stores[i], ds.Places[i].Detail)
	}
	for _, i := range rep.Unreachable {
		fmt.Fprintf(out, "  NOT CHECKED: store %d (%s) did not answer\n", i, ds.Stores[i])
	}
	switch {
	case !rep.Recoverable():
		fmt.Fprintf(out, "UNRECOVERABLE: shards %v\n", rep.Unrecoverable)
	case !rep.Complete():
		fmt.Fprintf(out, "INCOMPLETE: %d fragments not checked on stores that did not answer; %d damaged among the rest\n", rep.Unchecked, len(rep.Damaged))
	case rep.Intact():
		fmt.Fprintln(out, "OK: every fragment, block and sample checksum verified")
	default:
		fmt.Fprintf(out, "DAMAGED: %d fragments, %d manifest copies, %d index copies, %d identities, %d foreign stores; all recoverable\n",
			len(rep.Damaged), len(rep.BadManifests), len(rep.BadIndexes), len(rep.NoIdentity), len(rep.Foreign))
	}
}

func newRepairCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "repair --stores URL,... NAME",
		Short: "Rebuild lost or corrupt fragments from the survivors",
		Long: `Repair verifies the dataset, then rebuilds every missing or corrupt fragment
from the surviving ones and writes it back, and rewrites missing or corrupt
manifest copies and store identities. A store replaced by an empty one is
refilled this way.

Repair proves every write safe before it makes one. It writes nothing when
some block stripe lost more than m blocks (exit 2), when a store did not
answer or the stores are out of order (exit 3), or when a store holds
another dataset of this name, unless --force says to overwrite that store.`,
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
	ds, err := dataset.Open(ctx, stores, name, dataset.Options{Logger: log})
	if err != nil {
		return notChecked(err)
	}
	rep, bar, err := verifyWithProgress(ctx, ds)
	bar.Finish()
	if err != nil {
		return notChecked(err)
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
	n, err := ds.Repair(ctx, rep, force, rbar.Add)
	rbar.Finish()
	switch {
	case errors.Is(err, dataset.ErrIncomplete):
		return notChecked(err)
	case errors.Is(err, dataset.ErrForeignStore):
		return &exitError{exitDamaged, err}
	case err != nil:
		return &exitError{exitUnrecoverable, err}
	}
	fmt.Fprintf(out, "repaired %s: wrote %d objects; run shardfs verify %s to confirm\n", name, n, name)
	return nil
}
