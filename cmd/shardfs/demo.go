package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
)

func newDemoCmd(g *globals) *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "demo [DIR]",
		Short: "Generate a small imbalanced dataset, ingest it into 6 local stores RS(4,2), verify it",
		Long: `Demo runs the whole flow with no server: it writes an imbalanced labelled
dataset (10 classes, about 50 MB) to DIR/source, ingests it into six file://
stores DIR/store0..5 with RS(4,2), damages two stores, verifies, repairs,
and verifies again. DIR defaults to ./shardfs-demo and is reused.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "shardfs-demo"
			if len(args) == 1 {
				dir = args[0]
			}
			dir, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			ctx := cmd.Context()
			log := g.logger()
			src := filepath.Join(dir, "source")
			if _, err := os.Stat(src); os.IsNotExist(err) {
				n, err := synth.Write(src, synth.Demo)
				if err != nil {
					return fmt.Errorf("write demo dataset: %w", err)
				}
				fmt.Fprintf(out, "== wrote demo dataset %s: %s in 10 classes\n", src, humanize.IBytes(uint64(n)))
			}
			var urls []string
			var stores []backend.Store
			for i := 0; i < 6; i++ {
				u := "file://" + filepath.Join(dir, fmt.Sprintf("store%d", i))
				s, err := backend.Open(u, backend.OpenOptions{})
				if err != nil {
					return err
				}
				urls, stores = append(urls, u), append(stores, s)
			}
			fmt.Fprintf(out, "== ingest into 6 stores, RS(4,2):\n   %s\n", strings.Join(urls, "\n   "))
			if _, err := runIngest(ctx, log, out, stores, &ingestFlags{data: 4, parity: 2, shardSize: "8MiB", blockSize: "64KiB", force: true}, src, "demo"); err != nil {
				return err
			}
			fmt.Fprintln(out, "== verify")
			if _, err := runVerify(ctx, log, out, stores, "demo"); err != nil {
				return err
			}
			fmt.Fprintln(out, "== lose two stores: wipe store1, flip a byte in every fragment on store4")
			if err := damageDemo(dir); err != nil {
				return err
			}
			fmt.Fprintln(out, "== verify (expect damage, exit status 1)")
			if _, err := runVerify(ctx, log, out, stores, "demo"); err == nil {
				return fmt.Errorf("verify found no damage after the stores were damaged")
			}
			fmt.Fprintln(out, "== repair")
			if err := runRepair(ctx, log, out, stores, "demo"); err != nil {
				return err
			}
			fmt.Fprintln(out, "== verify again")
			if _, err := runVerify(ctx, log, out, stores, "demo"); err != nil {
				return err
			}
			_ = once // the mount comes next; until then demo always ends here
			fmt.Fprintf(out, "== done. Try: shardfs verify --stores %s demo\n", strings.Join(urls, ","))
			return nil
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "exit after one pass instead of serving until Ctrl-C")
	return cmd
}

// damageDemo removes store1's objects and flips one byte in each fragment on store4.
func damageDemo(dir string) error {
	if err := os.RemoveAll(filepath.Join(dir, "store1")); err != nil {
		return err
	}
	return filepath.Walk(filepath.Join(dir, "store4", "demo", "data"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Size() == 0 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b[len(b)/2] ^= 0xff
		return os.WriteFile(p, b, 0o644)
	})
}
