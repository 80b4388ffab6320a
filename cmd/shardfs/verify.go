package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

// notChecked wraps err as "could not check" (exit 3).
func notChecked(err error) error {
	if errors.Is(err, context.Canceled) {
		err = fmt.Errorf("interrupted before the check finished: nothing is known about the dataset's state: %w", err)
	}
	return &exitError{exitNotChecked, fmt.Errorf("could not check: %w", err)}
}

func newVerifyCmd(g *globals) *cobra.Command {
	var version int
	var pr *printer
	cmd := &cobra.Command{
		Use:   "verify --stores URL,... NAME",
		Short: "Read every fragment and check every checksum",
		Long: `Verify reads every fragment of every shard, checks every block checksum,
decodes every shard and checks every sample checksum, and checks each store's
copy of the manifest, of every shard index and group object, and of the
manifest of every version kept for rollback. It reports each missing or
corrupt fragment by shard, fragment and store, and whether the data is
still recoverable.

A store that does not answer is asked once, not once per fragment; its
fragments are reported as not checked. Stores are checked against the
identities written at ingest: a store list out of order is refused with
the order to pass, and a store holding another dataset of this name is named.

A store that answers but fails to serve one fragment (MinIO answers 503
SlowDownRead when its own copy fails its bit-rot check) is not down: that
fragment is reported damaged, and repair rebuilds it.

Exit status: 0 intact; 1 damaged but recoverable (run shardfs repair);
2 unrecoverable (some block stripe lost more than m blocks, a shard lost
every copy of its index, or a kept version every copy of its manifest);
3 could not check (a store did not answer, the stores are wrong or out of
order, the dataset was not found, or the run was interrupted).`,
		Example: `  shardfs verify imagenet-train                 # stores from SHARDFS_STORES or the config file
  shardfs verify imagenet-train || shardfs repair imagenet-train
  shardfs verify --stores http://10.0.0.1:9000/b/ds,...,http://10.0.0.6:9000/b/ds imagenet-train`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			pr.out = cmd.OutOrStdout()
			_, err = verifyAndPrint(cmd.Context(), g.logger(), pr, stores, args[0], version)
			return err
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "check this version of the dataset (shardfs versions lists them); 0: the current one")
	pr = addJSONFlag(cmd)
	cmd.Flags().Lookup("json").Usage = "print the report as one JSON document (for scripts): its \"state\" is ok, damaged, unrecoverable or incomplete, as the exit status says"
	return cmd
}

func runVerify(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, name string, version int) (*repository.Report, error) {
	return verifyAndPrint(ctx, log, &printer{out: out}, stores, name, version)
}

func verifyAndPrint(ctx context.Context, log *slog.Logger, pr *printer, stores []backend.Store, name string, version int) (*repository.Report, error) {
	ds, err := repository.Open(ctx, stores, name, repository.Options{Logger: log, LostIndexesOK: true, Version: version})
	if err != nil {
		return nil, notChecked(err)
	}
	rep, bar, err := verifyWithProgress(ctx, ds)
	bar.Finish()
	if err != nil {
		return nil, notChecked(err)
	}
	if err := pr.print(newVerifyReport(ds, rep), func(out io.Writer) error { printReport(out, ds, rep); return nil }); err != nil {
		return rep, err
	}
	switch {
	case !rep.Recoverable():
		return rep, &exitError{exitUnrecoverable, fmt.Errorf("%s is unrecoverable: %s", name, unrecoverableShards(ds, rep))}
	case !rep.Complete():
		return rep, notChecked(fmt.Errorf("%s: %d fragments not checked", storeProblems(ds, rep), rep.Unchecked))
	case rep.Intact():
		return rep, nil
	default:
		return rep, &exitError{exitDamaged, fmt.Errorf("%s is damaged but recoverable: run shardfs repair %s", name, name)}
	}
}

// storeProblems says what kept each store of rep.Unreachable from being checked.
func storeProblems(ds *repository.Dataset, rep *repository.Report) string {
	var parts []string
	down := false
	for _, i := range rep.Unreachable {
		parts = append(parts, fmt.Sprintf("store %d (%s) %s", i, ds.Stores[i], rep.StoreProblem(i)))
		down = down || strings.HasPrefix(rep.StoreProblem(i), "did not answer")
	}
	out := strings.Join(parts, "; ")
	if down {
		out += "; run verify again when the stores that did not answer are back"
	}
	return out
}

// unrecoverableShards names the shards that cannot be repaired, and why.
func unrecoverableShards(ds *repository.Dataset, rep *repository.Report) string {
	var why []string
	if len(rep.Unrecoverable) > 0 {
		why = append(why, fmt.Sprintf("shards %v lost more than m=%d blocks of one stripe", rep.Unrecoverable, ds.Manifest.Parity))
	}
	if len(rep.LostGroups) > 0 {
		why = append(why, fmt.Sprintf("groups %v lost every copy of their object (their shards' samples can be neither checked nor served)", rep.LostGroups))
	}
	if len(rep.LostIndexes) > 0 {
		why = append(why, fmt.Sprintf("shards %v lost every copy of their index (their samples can be neither checked nor served; see docs/tutorial.md, Health and repair, on lost indexes)", rep.LostIndexes))
	}
	if len(rep.BadSamples) > 0 {
		why = append(why, fmt.Sprintf("%d samples fail their checksum", len(rep.BadSamples)))
	}
	if len(rep.LostVersions) > 0 {
		why = append(why, fmt.Sprintf("versions %v have no intact copy of their manifest left (they can no longer be mounted or rolled back to)", rep.LostVersions))
	}
	for _, u := range rep.Unreadable {
		why = append(why, fmt.Sprintf("%s: no mount or plan can use this version; fix the listing and ingest it again as a new version (shardfs ingest --force keeps this one as a version)", u))
	}
	return strings.Join(why, "; ") + "; run shardfs repair to mend everything else"
}

func verifyWithProgress(ctx context.Context, ds *repository.Dataset) (*repository.Report, *progress, error) {
	m := ds.Manifest
	var total int64
	for i := range m.Shards {
		total += m.FragSize(i) * int64(m.Data+m.Parity)
	}
	bar := newProgress("verify "+ds.Name, total)
	rep, err := ds.Verify(ctx, bar.Add)
	return rep, bar, err
}

func printReport(out io.Writer, ds *repository.Dataset, rep *repository.Report) {
	m := ds.Manifest
	fmt.Fprintf(out, "dataset %s: %d samples, %d shards, %d fragments, RS(%d,%d), %s read\n",
		ds.Name, repository.SampleCount(m), rep.Shards, rep.Fragments, m.Data, m.Parity, humanize.IBytes(uint64(rep.Bytes)))
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
		if v, ok := rep.StaleManifests[i]; ok {
			fmt.Fprintf(out, "  manifest copy of version %d, not the current one's, on store %d (%s): a commit did not reach it; repair rewrites it\n", v, i, ds.Stores[i])
			continue
		}
		fmt.Fprintf(out, "  manifest copy missing or corrupt on store %d (%s)\n", i, ds.Stores[i])
	}
	for _, ic := range rep.BadIndexes {
		fmt.Fprintf(out, "  shard %d's index copy missing or corrupt on store %d (%s): %v\n", ic.Shard, ic.Store, ds.Stores[ic.Store], ic.Err)
	}
	for _, gc := range rep.BadGroups {
		fmt.Fprintf(out, "  group %d's object copy missing or corrupt on store %d (%s): %v\n", gc.Group, gc.Store, ds.Stores[gc.Store], gc.Err)
	}
	for _, vc := range rep.BadVersions {
		fmt.Fprintf(out, "  version %d's manifest copy missing or corrupt on store %d (%s): %v\n", vc.Version, vc.Store, ds.Stores[vc.Store], vc.Err)
	}
	for _, v := range rep.Removing {
		fmt.Fprintf(out, "  note: an interrupted gc was removing version %d; run shardfs gc %s again to finish\n", v, ds.Name)
	}
	for _, v := range rep.LostVersions {
		fmt.Fprintf(out, "  LOST VERSION: version %d: no store holds an intact copy of its manifest\n", v)
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
	var inGroups []int
	if r := ds.Manifest.Root; r != nil {
		for _, g := range rep.LostGroups {
			first, n := r.FirstShard(g), r.Groups[g].Shards
			fmt.Fprintf(out, "  LOST GROUP: group %d (shards %d-%d): no store holds an intact copy of its object; those shards can be neither checked nor served [UNRECOVERABLE]\n", g, first, first+n-1)
			for s := first; s < first+n; s++ {
				inGroups = append(inGroups, s)
			}
		}
	}
	for _, si := range rep.LostIndexes {
		if !slices.Contains(inGroups, si) {
			fmt.Fprintf(out, "  LOST INDEX: shard %d: no store holds an intact copy of its index [UNRECOVERABLE]\n", si)
		}
	}
	for _, i := range rep.Unreachable {
		fmt.Fprintf(out, "  NOT CHECKED: store %d (%s) %s\n", i, ds.Stores[i], rep.StoreProblem(i))
	}
	switch {
	case !rep.Recoverable():
		var what []string
		if shards := append(slices.Clone(rep.Unrecoverable), rep.LostIndexes...); len(shards) > 0 || len(rep.LostVersions) == 0 && len(rep.Unreadable) == 0 {
			what = append(what, fmt.Sprintf("shards %v", slices.Sorted(slices.Values(shards))))
		}
		if len(rep.LostVersions) > 0 {
			what = append(what, fmt.Sprintf("versions %v", rep.LostVersions))
		}
		if len(rep.LostGroups) > 0 {
			what = append(what, fmt.Sprintf("groups %v", rep.LostGroups))
		}
		for _, u := range rep.Unreadable {
			what = append(what, "unreadable "+u)
		}
		fmt.Fprintf(out, "UNRECOVERABLE: %s\n", strings.Join(what, ", "))
	case !rep.Complete():
		fmt.Fprintf(out, "INCOMPLETE: %d fragments not checked on the stores named above; %d damaged among the rest\n", rep.Unchecked, len(rep.Damaged))
	case rep.Intact():
		fmt.Fprintln(out, "OK: every fragment, block and sample checksum verified")
	default:
		groups := ""
		if ds.Manifest.Root != nil {
			groups = fmt.Sprintf(" %d group object copies,", len(rep.BadGroups))
		}
		versions := ""
		if len(rep.BadVersions) > 0 {
			versions = fmt.Sprintf(" %d kept version manifest copies,", len(rep.BadVersions))
		}
		fmt.Fprintf(out, "DAMAGED: %d fragments, %d manifest copies, %d index copies,%s%s %d identities, %d foreign stores; all recoverable\n",
			len(rep.Damaged), len(rep.BadManifests), len(rep.BadIndexes), groups, versions, len(rep.NoIdentity), len(rep.Foreign))
	}
}

// verifyReport is verify's report as --json prints it: the same report
// the text shows, each problem with the shard, fragment, store or version
// it is about.
type verifyReport struct {
	Dataset   string `json:"dataset"`
	Version   int    `json:"version"`
	State     string `json:"state"` // ok, damaged, unrecoverable or incomplete
	Samples   int64  `json:"samples"`
	Shards    int    `json:"shards"`
	Fragments int    `json:"fragments"`
	Data      int    `json:"data"`
	Parity    int    `json:"parity"`
	BytesRead int64  `json:"bytes_read"`

	Damaged        []damagedFragment `json:"damaged_fragments"`
	Unrecoverable  []int             `json:"unrecoverable_shards"`
	BadSamples     []string          `json:"bad_samples"`
	BadManifests   []int             `json:"bad_manifest_stores"`
	StaleManifests map[int]int       `json:"stale_manifests,omitempty"` // store: the version its copy is of
	BadIndexes     []objectCopy      `json:"bad_index_copies"`
	BadGroups      []objectCopy      `json:"bad_group_copies"`
	BadVersions    []objectCopy      `json:"bad_version_copies"`
	LostVersions   []int             `json:"lost_versions"`
	LostGroups     []int             `json:"lost_groups"`
	LostIndexes    []int             `json:"lost_indexes"`
	Removing       []int             `json:"removing_versions"`
	NoIdentity     []int             `json:"stores_without_identity"`
	Pending        []int             `json:"stores_with_pending_copies"`
	Foreign        []int             `json:"foreign_stores"`
	Unreadable     []string          `json:"unreadable"`
	NotChecked     []storeError      `json:"stores_not_checked"`
	Unchecked      int               `json:"fragments_not_checked"`
}

type damagedFragment struct {
	Shard       int    `json:"shard"`
	Fragment    int    `json:"fragment"`
	Store       int    `json:"store"`
	Error       string `json:"error"`
	BadBlocks   []int  `json:"bad_blocks,omitempty"` // nil: the whole fragment
	Recoverable bool   `json:"recoverable"`
}

// objectCopy is one store's copy of a shard index, group object or kept
// version's manifest: Of is the shard, group or version.
type objectCopy struct {
	Of    int    `json:"of"`
	Store int    `json:"store"`
	Error string `json:"error"`
}

func newVerifyReport(ds *repository.Dataset, rep *repository.Report) verifyReport {
	m := ds.Manifest
	v := verifyReport{Dataset: ds.Name, Version: m.VersionNumber(), Samples: repository.SampleCount(m), Shards: rep.Shards, Fragments: rep.Fragments,
		Data: m.Data, Parity: m.Parity, BytesRead: rep.Bytes, Unrecoverable: nonNil(rep.Unrecoverable), BadSamples: nonNil(rep.BadSamples),
		BadManifests: nonNil(rep.BadManifests), StaleManifests: rep.StaleManifests, LostVersions: nonNil(rep.LostVersions),
		LostGroups: nonNil(rep.LostGroups), LostIndexes: nonNil(rep.LostIndexes), Removing: nonNil(rep.Removing), NoIdentity: nonNil(rep.NoIdentity),
		Pending: nonNil(rep.Pending), Foreign: nonNil(rep.Foreign), Unreadable: nonNil(rep.Unreadable), Unchecked: rep.Unchecked,
		Damaged: []damagedFragment{}, BadIndexes: []objectCopy{}, BadGroups: []objectCopy{}, BadVersions: []objectCopy{}, NotChecked: []storeError{}}
	switch {
	case !rep.Recoverable():
		v.State = "unrecoverable"
	case !rep.Complete():
		v.State = "incomplete"
	case rep.Intact():
		v.State = "ok"
	default:
		v.State = "damaged"
	}
	for _, d := range rep.Damaged {
		v.Damaged = append(v.Damaged, damagedFragment{d.Shard, d.Frag, d.Store, fmt.Sprint(d.Err), d.BadBlocks, !slices.Contains(rep.Unrecoverable, d.Shard)})
	}
	for _, c := range rep.BadIndexes {
		v.BadIndexes = append(v.BadIndexes, objectCopy{c.Shard, c.Store, fmt.Sprint(c.Err)})
	}
	for _, c := range rep.BadGroups {
		v.BadGroups = append(v.BadGroups, objectCopy{c.Group, c.Store, fmt.Sprint(c.Err)})
	}
	for _, c := range rep.BadVersions {
		v.BadVersions = append(v.BadVersions, objectCopy{c.Version, c.Store, fmt.Sprint(c.Err)})
	}
	for _, i := range rep.Unreachable {
		v.NotChecked = append(v.NotChecked, storeError{i, rep.StoreProblem(i)})
	}
	return v
}

// nonNil is xs, or an empty slice for nil, so JSON shows [] and not null.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
