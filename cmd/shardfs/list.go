package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/heal"
	"github.com/shardfs/shardfs/repository"
)

func newListCmd(g *globals) *cobra.Command {
	var pr *printer
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the datasets the stores hold: ingest, size, code, and manifest copies",
		Long: `List names the datasets on the stores, one line each: its ingest (the
version a mount reads), samples, bytes, shards and erasure code, and on how
many stores its manifest object is. Fewer copies than stores means a store
is down or lost its copy: shardfs verify NAME says which, and shardfs repair
NAME rewrites it. A name whose manifest copies cannot be read is listed
with why; a name with no manifest object on any store is not a dataset and
is not listed. MARGIN is how many more stores the dataset can lose, as
its healer (shardfs heal) last found it: "- (no healer)" when none runs.`,
		Example: `  shardfs list
  shardfs list --stores http://10.0.0.1:9000/b/ds,...,http://10.0.0.6:9000/b/ds
  shardfs list --json | jq -r '.datasets[].name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			pr.out = cmd.OutOrStdout()
			return runList(cmd.Context(), pr, stores)
		},
	}
	pr = addJSONFlag(cmd)
	return cmd
}

// listReport is what list prints.
type listReport struct {
	Datasets []listedDataset `json:"datasets"`
	// Unlisted are the stores that could not be listed, by index.
	Unlisted []storeError `json:"unlisted_stores,omitempty"`
}

type listedDataset struct {
	Name           string `json:"name"`
	Ingest         string `json:"ingest,omitempty"`
	Samples        int64  `json:"samples"`
	Bytes          int64  `json:"bytes"`
	Shards         int    `json:"shards"`
	Data           int    `json:"data"`
	Parity         int    `json:"parity"`
	ManifestCopies int    `json:"manifest_copies"`
	Stores         int    `json:"stores"`
	// Unreadable says why the manifest copies could not be read; the
	// numbers are then unknown (0).
	Unreadable string `json:"unreadable,omitempty"`
	// Margin is how many more stores the dataset can lose, as its healer
	// (shardfs heal) last found it; nil when no healer recorded one for
	// this version. MarginCheckedUnix is when.
	Margin            *int  `json:"margin,omitempty"`
	MarginCheckedUnix int64 `json:"margin_checked_unix,omitempty"`
}

type storeError struct {
	Store int    `json:"store"`
	Error string `json:"error"`
}

func runList(ctx context.Context, pr *printer, stores []backend.Store) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	names := make([][]string, len(stores))
	listErrs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		var err error
		names[i], err = backend.TopNames(ctx, s)
		return err
	})
	var all []string
	for i, ns := range names {
		if listErrs[i] == nil {
			all = append(all, ns...)
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	up, failed := backend.Split(listErrs)
	if len(up) == 0 {
		return fmt.Errorf("no store could be listed: %v", failed[0])
	}
	rep := listReport{Datasets: []listedDataset{}}
	for _, name := range all {
		if repository.CheckName(name) != nil {
			continue
		}
		copies := repository.Copies(ctx, stores, repository.ManifestObject(name))
		if copies == 0 {
			continue // not a dataset: no manifest on any store
		}
		d := listedDataset{Name: name, ManifestCopies: copies, Stores: len(stores)}
		if m, err := repository.LoadHeader(ctx, stores, name, nil); err != nil {
			d.Unreadable = strings.ReplaceAll(err.Error(), "\n", " ")
		} else {
			d.Ingest, d.Samples, d.Bytes, d.Shards, d.Data, d.Parity = m.IngestID, repository.SampleCount(m), m.TotalBytes(), m.NumShards(), m.Data, m.Parity
			if st, _ := heal.ReadState(ctx, stores, name); st != nil && st.Version == m.IngestID {
				d.Margin, d.MarginCheckedUnix = &st.Margin, st.Updated
			}
		}
		rep.Datasets = append(rep.Datasets, d)
	}
	for i, err := range listErrs {
		if err != nil {
			rep.Unlisted = append(rep.Unlisted, storeError{i, err.Error()})
		}
	}
	return pr.print(rep, func(out io.Writer) error {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tINGEST\tSAMPLES\tBYTES\tSHARDS\tCODE\tMANIFEST ON\tMARGIN")
		for _, d := range rep.Datasets {
			if d.Unreadable != "" {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%d of %d stores; unreadable: %s\n", d.Name, d.ManifestCopies, d.Stores, d.Unreadable)
				continue
			}
			margin := "- (no healer)"
			if d.Margin != nil {
				margin = fmt.Sprintf("%d of %d (healer, %s)", *d.Margin, d.Parity, humanize.Time(time.Unix(d.MarginCheckedUnix, 0)))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\tRS(%d,%d)\t%d of %d stores\t%s\n", d.Name, d.Ingest, d.Samples, humanize.IBytes(uint64(d.Bytes)),
				d.Shards, d.Data, d.Parity, d.ManifestCopies, d.Stores, margin)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, u := range rep.Unlisted {
			fmt.Fprintf(out, "store %d could not be listed: %s\n", u.Store, u.Error)
		}
		return nil
	})
}
