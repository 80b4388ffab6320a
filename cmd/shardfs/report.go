package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/layout"
	"github.com/shardfs/shardfs/repository"
)

func newReportCmd(g *globals) *cobra.Command {
	var run string
	var epoch, version int
	cmd := &cobra.Command{
		Use:   "report --stores URL,... --run RUN --epoch E NAME FILE|-",
		Short: "Record the trainer's report of an epoch (a number per stratum), from which --feedback weights the next",
		Long: `Report records what the trainer measured in epoch E of run RUN over dataset
NAME: a number per stratum, higher meaning "needs more", usually the mean
loss of the stratum's samples. Mounts with --feedback eg --run RUN then
compute epoch E+1's weights from it: a stratum's share of the next epoch
∝ its share now × exp(step × its value) (the exponentiated-gradient rule
of DoReMi), each at least the floor.

FILE (or - for standard input) is a JSON object of stratum name to number,
the names as .shardfs/info.json lists them under "strata". A stratum left
out counts as the mean of those given.

A report is written once, to every store, and needs a majority of them.
The first report of an epoch stands: a second with other numbers is
refused, so a job that resumes recomputes the weights it had. Only the
process that reports (rank 0) needs write credentials; every mount reads
the reports from the stores. The Python loader's report() calls this.`,
		Example: `  echo '{"cat": 0.9, "dog": 0.4, "bird": 2.1}' | shardfs report --stores $SHARDFS_STORES --run r1 --epoch 0 pets -`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, file := args[0], args[1]
			if !cmd.Flags().Changed("epoch") || epoch < 0 {
				return fmt.Errorf("--epoch: give the epoch the report is of (0 or more)")
			}
			if err := repository.CheckRunName(run); err != nil {
				return fmt.Errorf("--run: %v", err)
			}
			var r io.Reader = cmd.InOrStdin()
			where := "the report on standard input" // what errors call FILE
			if file != "-" {
				where = file
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, repository.MaxReportBytes+1))
			if err != nil {
				return err
			}
			if len(b) > repository.MaxReportBytes {
				// Cut short, it would fail to parse with no word of why.
				return fmt.Errorf("%s: more than %d bytes: a report is one number per stratum; give the strata's values alone", where, repository.MaxReportBytes)
			}
			var values map[string]float64
			if err := json.Unmarshal(b, &values); err != nil {
				return fmt.Errorf("%s: %v: give a JSON object of stratum name to number, e.g. {\"cat\": 0.9, \"dog\": 0.4}", where, err)
			}
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			m, err := repository.LoadManifestVersion(cmd.Context(), stores, name, version, g.logger())
			if err != nil {
				return err
			}
			names := make([]string, len(m.Strata))
			for c, s := range m.Strata {
				names[c] = s.Name
			}
			if _, err := layout.CheckReport(values, names); err != nil {
				return fmt.Errorf("%s: %v", where, err)
			}
			if err := repository.RecordReport(cmd.Context(), stores, name, &repository.EpochReport{Run: run, Epoch: epoch, Strata: values}); err != nil {
				return err
			}
			keys := slices.Sorted(maps.Keys(values))
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %.4g", k, values[k]))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recorded run %s, epoch %d: %s\nmounts with --feedback --run %s compute epoch %d's weights from it\n", run, epoch, strings.Join(parts, ", "), run, epoch+1)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "the run's name, as the mounts' --run")
	cmd.Flags().IntVar(&epoch, "epoch", -1, "the epoch the report is of")
	cmd.Flags().IntVar(&version, "version", 0, "the dataset version the run reads, for its strata (0: the current one)")
	return cmd
}
