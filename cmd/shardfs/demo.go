package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/synth"
	"github.com/shardfs/shardfs/manifest"
)

func newDemoCmd(g *globals) *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "demo [DIR]",
		Short: "The whole flow on local stores: ingest RS(4,2), mount, read, lose 2 stores, repair",
		Long: `Demo needs no server. In DIR (default ./shardfs-demo) it writes an
imbalanced labelled dataset (10 classes, about 50 MB), ingests it into six
file:// stores with RS(4,2), verifies it, mounts it at DIR/mnt for 2 ranks,
prints the tree and the class mix of the first batches, reads rank 0's epoch
and checks every sample against its source, then wipes one store and corrupts
another and reads rank 1's epoch through the damage. Finally it repairs the
stores and verifies again. With --once it unmounts and exits; otherwise it
keeps serving DIR/mnt until Ctrl-C.`,
		Example: `  shardfs demo --once                # run it all and exit
  shardfs demo /tmp/demo             # then, in another shell: ls /tmp/demo/mnt/epochs/0000/rank-000`,
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
			return runDemo(cmd.Context(), g, cmd.OutOrStdout(), dir, once)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "exit after one pass instead of serving until Ctrl-C")
	return cmd
}

func runDemo(ctx context.Context, g *globals, out io.Writer, dir string, once bool) error {
	log := g.logger()
	src := filepath.Join(dir, "source")
	if _, err := os.Stat(src); os.IsNotExist(err) {
		n, err := synth.Write(src, synth.Demo)
		if err != nil {
			return fmt.Errorf("write demo dataset: %w", err)
		}
		fmt.Fprintf(out, "== wrote demo dataset %s: %s in 10 classes\n", src, humanize.IBytes(uint64(n)))
	}
	var stores []backend.Store
	for i := 0; i < 6; i++ {
		u := "file://" + filepath.Join(dir, fmt.Sprintf("store%d", i))
		s, err := backend.Open(u, backend.OpenOptions{})
		if err != nil {
			return err
		}
		stores = append(stores, s)
	}
	fmt.Fprintf(out, "== ingest into 6 local stores %s/store{0..5}, RS(4,2)\n", dir)
	if _, err := runIngest(ctx, log, out, stores, &ingestFlags{data: 4, parity: 2, shardSize: "8MiB", blockSize: "64KiB", force: true, groupShards: manifest.DefaultGroupShards, maxRecord: defaultMaxRecordSize}, src, "demo"); err != nil {
		return err
	}
	fmt.Fprintln(out, "== verify")
	if _, err := runVerify(ctx, log, out, stores, "demo", 0); err != nil {
		return err
	}

	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	mf := &mountFlags{cacheSize: "256MiB", readAheadKB: 4096, readTimeout: 10 * time.Second,
		order: orderFlags{rank: "all", world: 2, batch: 32, epochs: 2, alpha: 1, tail: "drop"}}
	mt, err := mountDataset(ctx, log, stores, "demo", mnt, mf)
	if err != nil {
		return err
	}
	defer func() {
		if mt != nil {
			mt.Close()
		}
	}()
	fmt.Fprintf(out, "== mounted at %s (2 ranks, batch size 32, 2 epochs)\n", mnt)
	if err := demoTree(out, mnt); err != nil {
		return err
	}
	rank0 := filepath.Join(mnt, "epochs", "0000", "rank-000")
	if err := demoBatchTable(out, rank0, 6); err != nil {
		return err
	}
	if err := demoReadEpoch(out, rank0, src, "rank 0, healthy"); err != nil {
		return err
	}

	fmt.Fprintln(out, "== lose two stores: wipe store1, flip a byte in every fragment on store4")
	if err := damageDemo(dir); err != nil {
		return err
	}
	if err := demoReadEpoch(out, filepath.Join(mnt, "epochs", "0000", "rank-001"), src, "rank 1, 2 of 6 stores lost"); err != nil {
		return err
	}
	s := mt.Metrics.Snapshot()
	fmt.Fprintf(out, "   stats: %s served, cache hits %d / misses %d, stalls %d (%.3fs), degraded reads %d, checksum failures %d\n",
		humanize.IBytes(uint64(s.BytesServed)), s.CacheHits, s.CacheMisses, s.Stalls, s.StallSeconds, s.DegradedReads, s.ChecksumFailures)
	fmt.Fprintln(out, "== verify (expect damage, exit status 1)")
	if _, err := runVerify(ctx, log, io.Discard, stores, "demo", 0); err == nil {
		return fmt.Errorf("verify found no damage after the stores were damaged")
	} else {
		fmt.Fprintf(out, "   %v\n", err)
	}
	fmt.Fprintln(out, "== repair, then verify")
	if err := runRepair(ctx, log, io.Discard, stores, "demo", false); err != nil {
		return err
	}
	if _, err := runVerify(ctx, log, out, stores, "demo", 0); err != nil {
		return err
	}
	if once {
		fmt.Fprintln(out, "== done (--once): unmounting")
		return nil
	}
	fmt.Fprintf(out, "== serving %s until Ctrl-C. Try:\n   ls %s/epochs/0001/rank-001 | head\n   tar tvf %s/epochs/0000/rank-000/batch-000000.tar | head\n   shardfs stats %s\n",
		mnt, mnt, mnt, mnt)
	if _, err := exec.LookPath("shardfs"); err != nil {
		fmt.Fprintln(out, "   (shardfs is not on PATH: go install ./cmd/shardfs puts it in $(go env GOPATH)/bin)")
	}
	err = mt.Serve(ctx)
	mt = nil
	return err
}

func demoTree(out io.Writer, mnt string) error {
	fmt.Fprintln(out, "   tree:")
	for _, p := range []string{".shardfs", "samples", "epochs", "epochs/0000", "epochs/0000/rank-000"} {
		entries, err := os.ReadDir(filepath.Join(mnt, p))
		if err != nil {
			return err
		}
		var names []string
		for i, e := range entries {
			if i == 4 {
				names = append(names, fmt.Sprintf("... (%d entries)", len(entries)))
				break
			}
			fi, _ := e.Info()
			if e.IsDir() {
				names = append(names, e.Name()+"/")
			} else {
				names = append(names, fmt.Sprintf("%s (%s)", e.Name(), humanize.IBytes(uint64(fi.Size()))))
			}
		}
		fmt.Fprintf(out, "     %-22s %s\n", p+"/", strings.Join(names, "  "))
	}
	return nil
}

// demoBatchTable prints each class's count in the first batches, read from index.csv.
func demoBatchTable(out io.Writer, rankDir string, batches int) error {
	f, err := os.Open(filepath.Join(rankDir, "index.csv"))
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	counts := map[string][]int{}
	var classes []string
	for _, r := range rows[1:] {
		var b int
		fmt.Sscan(r[1], &b)
		if b >= batches {
			break
		}
		if counts[r[3]] == nil {
			counts[r[3]] = make([]int, batches)
			classes = append(classes, r[3])
		}
		counts[r[3]][b]++
	}
	// The target is the class's share of the dataset, from info.json.
	var info struct {
		Dataset struct {
			Strata []struct {
				Name  string `json:"name"`
				Count int    `json:"count"`
			} `json:"strata"`
		} `json:"dataset"`
	}
	b, err := os.ReadFile(filepath.Join(rankDir, "..", "..", "..", ".shardfs", "info.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return err
	}
	total, all := map[string]int{}, 0
	for _, st := range info.Dataset.Strata {
		total[st.Name] = st.Count
		all += st.Count
	}
	fmt.Fprintln(out, "   class mix of the first batches of rank 0 (from index.csv; target = 32 x the class's share of the dataset):")
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "     class\t")
	for b := 0; b < batches; b++ {
		fmt.Fprintf(tw, "b%d\t", b)
	}
	fmt.Fprint(tw, "target\t\n")
	sortStrings(classes)
	for _, c := range classes {
		fmt.Fprintf(tw, "     %s\t", c)
		for b := 0; b < batches; b++ {
			fmt.Fprintf(tw, "%d\t", counts[c][b])
		}
		fmt.Fprintf(tw, "%.2f\t\n", 32*float64(total[c])/float64(max(all, 1)))
	}
	return tw.Flush()
}

// demoReadEpoch reads a rank's epoch.tar and checks every member against the source.
func demoReadEpoch(out io.Writer, rankDir, src, label string) error {
	start := time.Now()
	data, err := os.ReadFile(filepath.Join(rankDir, "epoch.tar"))
	if err != nil {
		return fmt.Errorf("read %s epoch.tar: %w", label, err)
	}
	elapsed := time.Since(start)
	index, err := os.ReadFile(filepath.Join(rankDir, "index.csv"))
	if err != nil {
		return fmt.Errorf("read %s index.csv: %w", label, err)
	}
	rows, err := csv.NewReader(bytes.NewReader(index)).ReadAll()
	if err != nil {
		return err
	}
	tr := tar.NewReader(bytes.NewReader(data))
	n := 0
	for _, r := range rows[1:] {
		hdr, err := tr.Next()
		if err != nil {
			return fmt.Errorf("%s: epoch.tar: %w", label, err)
		}
		body, _ := io.ReadAll(tr)
		want, err := os.ReadFile(filepath.Join(src, r[2]))
		if err != nil || !bytes.Equal(body, want) {
			return fmt.Errorf("%s: member %s differs from its source %s", label, hdr.Name, r[2])
		}
		if _, err := tr.Next(); err != nil { // the .cls member
			return err
		}
		n++
	}
	fmt.Fprintf(out, "== read %s: epoch.tar %s in %v (%.0f MB/s); %d samples byte-identical to the source\n",
		label, humanize.IBytes(uint64(len(data))), elapsed.Round(time.Millisecond), float64(len(data))/1e6/elapsed.Seconds(), n)
	return nil
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

func sortStrings(s []string) { slices.Sort(s) }
