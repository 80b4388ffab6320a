package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/heal"
	"github.com/shardfs/shardfs/repository"
)

func newHealCmd(g *globals) *cobra.Command {
	var (
		once               bool
		batch              int
		pause, hint, lease time.Duration
		byteRate           string
		requestRate        float64
		metricsAddr        string
	)
	cmd := &cobra.Command{
		Use:   "heal --stores URL,... NAME",
		Short: "Keep a dataset at full redundancy, as a service: scrub, rebuild, mend",
		Long: `Heal runs until stopped, so that no person has to run repair. It reads and
checks the dataset a few shards at a time (a scrub), rebuilds every fragment
it finds missing or corrupt at once, mends the manifest copies, identities,
indexes and kept versions once a cycle, and heals first the shards that
mounts read degraded (they leave a hint on the stores). A store replaced by
an empty one (with its bucket created) is refilled this way.

It records where it is on the stores after every step, so a healer that is
restarted resumes there. One healer of a dataset writes at a time: run one
on each of two hosts, and the second stands by until the first stops
renewing its lease (--lease).

Its margin, the number of stores the dataset can still lose, is logged after
every cycle, exported as shardfs_heal_redundancy_margin on --metrics-addr,
and shown by shardfs list. Metadata is written only under the dataset's
ingest lock, held for the seconds the mending takes: an ingest started
then is refused, naming the healer, and can be run again at once.

--rate-bytes and --rate-requests bound what the healer asks of all stores
together, so a scrub never takes the bandwidth a training job reads with.`,
		Example: `  shardfs heal imagenet-train                                  # a service: scrub every 10 minutes, heal at once
  shardfs heal --rate-bytes 50MiB --metrics-addr 127.0.0.1:9465 imagenet-train
  shardfs heal --once imagenet-train                           # one whole cycle, then exit`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rates heal.Rates
			if byteRate != "" && byteRate != "0" {
				n, err := humanize.ParseBytes(byteRate)
				if err != nil {
					return fmt.Errorf("--rate-bytes %q: a size per second, as in 50MiB", byteRate)
				}
				rates.BytesPerSec = int64(n)
			}
			if requestRate < 0 {
				return fmt.Errorf("--rate-requests %v: at least 0 (0: no bound)", requestRate)
			}
			rates.RequestsPerSec = requestRate
			if batch < 1 {
				return fmt.Errorf("--batch %d: at least 1 shard a step", batch)
			}
			if pause <= 0 || hint <= 0 {
				return fmt.Errorf("--pause %v, --hint-poll %v: both must be above 0 (--pause 1s scrubs almost without pause)", pause, hint)
			}
			if lease < 4*time.Second {
				return fmt.Errorf("--lease %v: at least 4s (the holder renews it every quarter)", lease)
			}
			if err := repository.CheckName(args[0]); err != nil {
				return err
			}
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			log := g.logger()
			var metrics *heal.Metrics
			if metricsAddr != "" {
				reg := prometheus.NewRegistry()
				metrics = heal.NewMetrics(reg)
				ln, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-addr %s: %w", metricsAddr, err)
				}
				srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
				go srv.Serve(ln)
				defer srv.Close()
				log.Info("heal: serving metrics", "addr", ln.Addr().String())
			}
			var onCycle func(heal.Cycle)
			if once {
				out := cmd.OutOrStdout()
				onCycle = func(c heal.Cycle) {
					fmt.Fprintf(out, "healed %s (cycle %d): %d shards checked, %d objects written in %v; margin %d of %d\n",
						args[0], c.Number, c.Checked, c.Written, c.Took.Round(time.Millisecond), c.Margin, c.Parity)
				}
			}
			err = heal.Run(cmd.Context(), heal.Config{Stores: stores, Name: args[0], Batch: batch, Pause: pause, HintPoll: hint,
				Lease: lease, Rates: rates, Once: once, OnCycle: onCycle, Logger: log, Metrics: metrics})
			if errors.Is(err, repository.ErrLocked) {
				return fmt.Errorf("%w (with --once, heal does not wait for another healer)", err)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&once, "once", false, "run one whole scrub cycle (from where the last healer stopped), then exit")
	fl.IntVar(&batch, "batch", 4, "shards checked per step; where the scrub is is recorded after each")
	fl.DurationVar(&pause, "pause", 10*time.Minute, "wait between two scrub cycles (hints are healed meanwhile)")
	fl.DurationVar(&hint, "hint-poll", 5*time.Second, "how often to look for shards mounts read degraded")
	fl.DurationVar(&lease, "lease", 2*time.Minute, "how long a healer that stopped keeps its lock before another takes over")
	fl.StringVar(&byteRate, "rate-bytes", "0", "most bytes per second read and written, over all stores, e.g. 50MiB (0: no bound)")
	fl.Float64Var(&requestRate, "rate-requests", 0, "most requests per second, over all stores (0: no bound)")
	fl.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9465 (default: none)")
	return cmd
}
