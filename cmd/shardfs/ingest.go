package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/ingest"
)

type ingestFlags struct {
	data, parity int
	shardSize    string
	blockSize    string
	seed         uint64
	force        bool
	labelFields  []string
}

func newIngestCmd(g *globals) *cobra.Command {
	f := &ingestFlags{}
	cmd := &cobra.Command{
		Use:   "ingest --stores URL,... --data K --parity M SRC NAME",
		Short: "Pack, erasure-code and upload a labelled dataset, then commit it",
		Long: `Ingest reads SRC, places its samples into shards by a seeded stratified
shuffle (so every shard mirrors the class mix), encodes each shard RS(K,M)
into K data and M parity fragments on the K+M stores, and commits the dataset
by writing its manifest to every store last.

SRC is an ImageFolder tree SRC/<class>/<file...> (the class is the first
directory), or a listing: a .csv of path,label (an optional header row
"path,label[,field...]" names label fields; use --label-fields to pick) or a
.jsonl of {"path": ..., "label": ...}. Listed paths are relative to the
listing's directory. Keys are the relative paths.

Interrupting an ingest (even kill -9) leaves no visible dataset; run the same
command again. An existing NAME is only replaced with --force.`,
		Example: `  shardfs ingest --stores file:///srv/s0,file:///srv/s1,file:///srv/s2 --data 2 --parity 1 ./train train
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... shardfs ingest \
    --stores http://10.0.0.1:9000/ds,http://10.0.0.2:9000/ds,... --data 4 --parity 2 ./imagenet/train imagenet-train`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			_, err = runIngest(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, f, args[0], args[1])
			return err
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.data, "data", 4, "data fragments per shard (k)")
	fl.IntVar(&f.parity, "parity", 2, "parity fragments per shard (m): up to m stores may fail")
	fl.StringVar(&f.shardSize, "shard-size", "64MiB", "target shard size")
	fl.StringVar(&f.blockSize, "block-size", "64KiB", "checksum block size (at most 1MiB); smaller blocks read less beyond each sample")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the stratified placement into shards")
	fl.BoolVar(&f.force, "force", false, "replace an existing dataset of the same name")
	fl.StringSliceVar(&f.labelFields, "label-fields", nil, "label fields that form the stratum (listings only; default: label)")
	return cmd
}

func runIngest(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, f *ingestFlags, src, name string) (*ingest.Result, error) {
	shardSize, err := humanize.ParseBytes(f.shardSize)
	if err != nil {
		return nil, fmt.Errorf("--shard-size %q: %v (use e.g. 64MiB)", f.shardSize, err)
	}
	blockSize, err := humanize.ParseBytes(f.blockSize)
	if err != nil || blockSize > erasure.MaxBlockSize {
		return nil, fmt.Errorf("--block-size %q: use a size up to 1MiB, e.g. 64KiB", f.blockSize)
	}
	source, err := ingest.Scan(src, f.labelFields)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, it := range source.Items {
		total += it.Size
	}
	bar := newProgress("ingest "+name, total)
	res, err := ingest.Run(ctx, source, ingest.Options{
		Name: name, Stores: stores, Data: f.data, Parity: f.parity, BlockSize: int(blockSize),
		ShardSize: int64(shardSize), Seed: f.seed, Force: f.force, Logger: log, Progress: bar.Add,
	})
	bar.Finish()
	if err != nil {
		return nil, err
	}
	m := res.Manifest
	fmt.Fprintf(out, "committed %s: %d samples in %d strata, %d shards, RS(%d,%d) over %d stores\n",
		name, res.Samples, len(m.Strata), len(m.Shards), m.Data, m.Parity, len(stores))
	fmt.Fprintf(out, "  %s of samples, %s stored (%.2fx), %.1f MB/s, %s\n",
		humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.StoredBytes)),
		float64(res.StoredBytes)/float64(max(res.Bytes, 1)), float64(res.Bytes)/1e6/res.Elapsed.Seconds(), res.Elapsed.Round(1e6))
	var parts []string
	for _, st := range m.Strata {
		parts = append(parts, fmt.Sprintf("%s=%d", st.Name, st.Count))
	}
	fmt.Fprintf(out, "  strata: %s\n", strings.Join(parts, " "))
	return res, nil
}
