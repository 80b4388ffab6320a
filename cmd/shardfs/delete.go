package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/repository"
)

func newDeleteCmd(g *globals) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete --stores URL,... NAME [--yes]",
		Short: "Delete a dataset: every version, and every object of it on every store",
		Long: `Delete removes dataset NAME from the stores: every version, and every object
under NAME/ on every store. It cannot be undone.

It refuses, deleting nothing:
  - while a mount serves the dataset: mounts keep a lease on the stores,
    and delete honours a lease until it is 15 minutes stale (at once, on
    this host, when the mount's process is gone);
  - while an ingest, append, rollback or gc of it runs, or a healer of it;
  - when a store does not answer, or holds another dataset of this name.
It says what it found, then asks for the dataset's name again, on stdin;
--yes deletes without asking. Killed at any moment, it leaves the dataset
whole, or unmountable with the rest of its objects still to go: run it
again to finish. Other datasets on the stores are never touched.`,
		Example: `  shardfs delete --stores ... old-train          # asks for the name again
  shardfs delete --stores ... old-train --yes    # in a script`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			in := bufio.NewReader(cmd.InOrStdin())
			rep, err := repository.Delete(cmd.Context(), stores, name, repository.DeleteOptions{
				Logger: g.logger(),
				Confirm: func(rep *repository.DeleteReport) error {
					printDeletion(out, rep, len(stores))
					if yes {
						return nil
					}
					fmt.Fprintf(out, "type the dataset's name to delete it: ")
					typed, err := in.ReadString('\n')
					typed = strings.TrimSpace(typed)
					switch {
					case typed == name:
						return nil
					case err != nil && typed == "":
						fmt.Fprintln(out)
						return errors.New("no name was typed (stdin ended)")
					default:
						return fmt.Errorf("the name typed, %q, is not %q", typed, name)
					}
				},
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "deleted %s: %d objects from %d stores\n", name, rep.Objects, len(stores))
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "delete without asking for the name again")
	return cmd
}

// printDeletion says what a delete found, before it asks.
func printDeletion(out io.Writer, rep *repository.DeleteReport, stores int) {
	if rep.Leftovers {
		fmt.Fprintf(out, "%s has no manifest on any store: %d objects under its name are what a delete or an ingest that did not finish left\n", rep.Name, rep.Objects)
		return
	}
	fmt.Fprintf(out, "%s: version %d of %d versions, %d samples (%s); %d objects on %d stores; no mount holds a lease on it\n",
		rep.Name, rep.Version, rep.Versions, rep.Samples, humanize.IBytes(uint64(rep.Bytes)), rep.Objects, stores)
}
