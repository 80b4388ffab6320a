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
	"github.com/shardfs/shardfs/dataset"
)

func newListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the datasets the stores hold: ingest, size, code, and manifest copies",
		Long: `List names the datasets on the stores, one line each: its ingest (the
version a mount reads), samples, bytes, shards and erasure code, and on how
many stores its manifest object is. Fewer copies than stores means a store
is down or lost its copy: shardfs verify NAME says which, and shardfs repair
NAME rewrites it. A name whose manifest copies cannot be read is listed
with why; a name with no manifest object on any store is not a dataset and
is not listed.`,
		Example: `  shardfs list
  shardfs list --stores http://10.0.0.1:9000/b/ds,...,http://10.0.0.6:9000/b/ds`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), cmd.OutOrStdout(), stores)
		},
	}
}

func runList(ctx context.Context, out io.Writer, stores []backend.Store) error {
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
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tINGEST\tSAMPLES\tBYTES\tSHARDS\tCODE\tMANIFEST ON")
	for _, name := range all {
		if dataset.CheckName(name) != nil {
			continue
		}
		statErrs := backend.OnEvery(stores, func(i int, s backend.Store) error {
			_, err := s.Stat(ctx, dataset.ManifestKey(name))
			return err
		})
		ok, _ := backend.Split(statErrs)
		copies := len(ok)
		if copies == 0 {
			continue // not a dataset: no manifest on any store
		}
		m, err := dataset.LoadHeader(ctx, stores, name, nil)
		if err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%d of %d stores; unreadable: %s\n", name, copies, len(stores), strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		n, bytes, shards := samples(m), m.TotalBytes(), m.NumShards()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\tRS(%d,%d)\t%d of %d stores\n", name, m.IngestID, n, humanize.IBytes(uint64(bytes)),
			shards, m.Data, m.Parity, copies, len(stores))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, err := range listErrs {
		if err != nil {
			fmt.Fprintf(out, "store %d could not be listed: %v\n", i, err)
		}
	}
	return nil
}
