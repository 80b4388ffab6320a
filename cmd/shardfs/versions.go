package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/repository"
)

func newVersionsCmd(g *globals) *cobra.Command {
	var pr *printer
	cmd := &cobra.Command{
		Use:   "versions --stores URL,... NAME",
		Short: "List a dataset's versions: number, parent, time, samples, bytes, what changed",
		Long: `Versions lists every version of dataset NAME, oldest first. Every commit
makes one: the first ingest, each ingest --append, each rollback, each
ingest --force that replaces the dataset. The current version is the one a
mount reads by default; shardfs mount --version N reads another, and
shardfs rollback NAME --to N makes N's content current again.

STATE is current, kept (mountable), or removed (shardfs gc deleted it).`,
		Example: `  shardfs versions --stores file:///srv/s0,file:///srv/s1,file:///srv/s2 train`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			pr.out = cmd.OutOrStdout()
			return runVersions(cmd.Context(), pr, stores, args[0])
		},
	}
	pr = addJSONFlag(cmd)
	return cmd
}

// versionsReport is what versions prints.
type versionsReport struct {
	Dataset  string          `json:"dataset"`
	Versions []listedVersion `json:"versions"`
}

type listedVersion struct {
	Number      int    `json:"number"`
	Parent      int    `json:"parent"` // 0: none
	Ingest      string `json:"ingest"`
	CreatedUnix int64  `json:"created_unix"`
	Samples     int64  `json:"samples"`
	Bytes       int64  `json:"bytes"`
	State       string `json:"state"` // current, kept or removed
	Change      string `json:"change"`
}

func runVersions(ctx context.Context, pr *printer, stores []backend.Store, name string) error {
	if err := repository.CheckName(name); err != nil {
		return err
	}
	cur, err := repository.LoadHeader(ctx, stores, name, nil)
	if err != nil {
		return err
	}
	rep := versionsReport{Dataset: name, Versions: []listedVersion{}}
	for _, v := range repository.History(cur) {
		state := "kept"
		if v.IngestID == cur.IngestID {
			state = "current"
		} else if !repository.AnyHolds(ctx, stores, repository.VersionObject(name, v.IngestID)) {
			state = "removed"
		}
		rep.Versions = append(rep.Versions, listedVersion{Number: v.Number, Parent: v.Parent, Ingest: v.IngestID, CreatedUnix: v.CreatedUnix,
			Samples: int64(v.Samples), Bytes: int64(v.Bytes), State: state, Change: v.Change})
	}
	return pr.print(rep, func(out io.Writer) error {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tPARENT\tCREATED\tSAMPLES\tBYTES\tSTATE\tCHANGE")
		for _, v := range rep.Versions {
			parent := "-"
			if v.Parent > 0 {
				parent = fmt.Sprint(v.Parent)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", v.Number, parent, time.Unix(v.CreatedUnix, 0).UTC().Format(time.RFC3339),
				v.Samples, humanize.IBytes(uint64(v.Bytes)), v.State, v.Change)
		}
		return tw.Flush()
	})
}
