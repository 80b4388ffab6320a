package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/ingest"
)

func newMigrateCmd(g *globals) *cobra.Command {
	var opts ingest.MigrateOptions
	var to string
	cmd := &cobra.Command{
		Use:   "migrate --stores OLD,... NAME --to-stores NEW,... [--data K --parity M]",
		Short: "Copy a dataset and its versions to other stores, re-encoded if asked, while mounts read on",
		Long: `Migrate copies dataset NAME, every version it keeps, from its stores (--stores)
to other stores (--to-stores), re-encoded in another erasure code if asked
(--data, --parity, --block-size; by default the dataset's). It only reads the
old stores: mounts of them read on throughout, and keep working after, so
the old set is the rollback until you remove it (shardfs gc on it, or by
hand). Every shard is read verified from the old stores (decoding around a
failed one), re-encoded, written, and read back before anything is
committed; memory holds a few shards at a time, whatever the dataset's size.
On the new stores the dataset gets the same versions, and one more: the
migration, whose content is the current version's.

Killed at any moment, nothing is committed on the new stores; the same
command again checks what was written, writes the rest, and commits. The new
stores must hold no other dataset of this name.`,
		Example: `  shardfs migrate --stores http://old-{0..5}:9000/b/ds train \
    --to-stores http://new-0:9000/b/ds,...,http://new-10:9000/b/ds --data 8 --parity 3
  shardfs mount --stores http://new-0:9000/b/ds,... train /mnt/train`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return fmt.Errorf("--to-stores: name the stores to migrate to, k+m URLs")
			}
			from, err := g.openStores()
			if err != nil {
				return err
			}
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			if opts.To, err = g.openURLs(cfg, strings.Split(to, ",")); err != nil {
				return fmt.Errorf("--to-stores: %w", err)
			}
			created := make([]bool, len(opts.To))
			if err := createBuckets(cmd.Context(), cmd.OutOrStdout(), opts.To, created); err != nil {
				takeBack(cmd.OutOrStdout(), opts.To, created)
				return err
			}
			opts.Name, opts.From, opts.Logger = args[0], from, g.logger()
			res, err := ingest.Migrate(cmd.Context(), opts)
			if err != nil {
				takeBack(cmd.OutOrStdout(), opts.To, created)
				return err
			}
			out := cmd.OutOrStdout()
			if res.Unchanged {
				fmt.Fprintf(out, "%s is migrated already: the new stores hold it, version %d: nothing to do\n", args[0], res.Version)
				return nil
			}
			fmt.Fprintf(out, "migrated %s from %s to %s: versions %v copied, version %d committed on the new stores\n",
				args[0], res.From, res.To, res.Versions, res.Version)
			fmt.Fprintf(out, "  %d shards, %s of samples, %s of fragments written and read back (%d found intact from an earlier run), %s\n",
				res.Shards, humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.Written)), res.Reused, res.Elapsed.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to-stores", "", "the stores to migrate to, k+m URLs (credentials as for --stores)")
	cmd.Flags().IntVar(&opts.Data, "data", 0, "data fragments per shard on the new stores (default: the dataset's)")
	cmd.Flags().IntVar(&opts.Parity, "parity", 0, "parity fragments per shard on the new stores (default: the dataset's)")
	cmd.Flags().IntVar(&opts.BlockSize, "block-size", 0, "checksum block size in bytes on the new stores (default: the dataset's)")
	return cmd
}
