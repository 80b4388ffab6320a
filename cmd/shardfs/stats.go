package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/metrics"
)

func newStatsCmd() *cobra.Command {
	var pr *printer
	var count int
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stats MOUNTPOINT",
		Short: "Print a mount's live counters once a second",
		Long: `Stats reads MOUNTPOINT/.shardfs/stats.json once a second and prints a
compact line: throughput, memory cache hit ratio, disk tier hit ratio (with
--cache-dir), prefetch lead, stalls, degraded reads, checksum failures and
hedged reads, then each store's state. It ends with the totals since the
mount started.`,
		Example: `  shardfs stats /mnt/data                       # until Ctrl-C
  shardfs stats --count 10 --interval 5s /mnt/data`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pr.out = cmd.OutOrStdout()
			return runStats(cmd.Context(), pr, args[0], count, interval)
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many lines (0: until Ctrl-C)")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between lines")
	pr = addJSONFlag(cmd)
	cmd.Flags().Lookup("json").Usage = "print one JSON document a line (JSON Lines): one per interval, then {\"total\": ...}, the counters since the mount started"
	return cmd
}

func readStats(mountpoint string) (metrics.Snapshot, error) {
	var s metrics.Snapshot
	b, err := os.ReadFile(mountpoint + "/.shardfs/stats.json")
	if err != nil {
		return s, fmt.Errorf("%s is not a shardfs mount? %w", mountpoint, err)
	}
	return s, json.Unmarshal(b, &s)
}

// statsLine is one interval of stats: rates over the interval, the rest
// as the mount counts them.
type statsLine struct {
	UptimeSeconds    float64 `json:"uptime_seconds"`
	MBPerSecond      float64 `json:"mb_per_second"`
	HitPercent       float64 `json:"hit_percent"`
	DiskHitPercent   float64 `json:"disk_hit_percent"` // -1: no disk tier
	LeadMB           float64 `json:"lead_mb"`
	LeadSeconds      float64 `json:"lead_seconds"`
	Stalls           int64   `json:"stalls"`
	StallSeconds     float64 `json:"stall_seconds"`
	DegradedReads    int64   `json:"degraded_reads"`
	ChecksumFailures int64   `json:"checksum_failures"`
	HedgedReads      int64   `json:"hedged_reads"`
	// StoreStates are the stores' states, in store order.
	StoreStates  []string          `json:"store_states"`
	NewAnomalies []metrics.Anomaly `json:"new_anomalies"`
}

// statsTotals closes stats: the mount's counters since it started.
type statsTotals struct {
	Total metrics.Snapshot `json:"total"`
}

func newStatsLine(prev, s metrics.Snapshot) statsLine {
	l := statsLine{UptimeSeconds: s.UptimeSeconds, DiskHitPercent: -1, LeadMB: float64(s.PrefetchLeadBytes) / 1e6, LeadSeconds: s.PrefetchLeadSecs,
		Stalls: s.Stalls, StallSeconds: s.StallSeconds, DegradedReads: s.DegradedReads, ChecksumFailures: s.ChecksumFailures, HedgedReads: s.HedgedReads,
		StoreStates: []string{}, NewAnomalies: newAnomalies(prev.Anomalies, s.Anomalies)}
	dt := s.UptimeSeconds - prev.UptimeSeconds
	l.MBPerSecond = float64(s.BytesServed-prev.BytesServed) / 1e6 / max(dt, 1e-9)
	if hits, misses := s.CacheHits-prev.CacheHits, s.CacheMisses-prev.CacheMisses; hits+misses > 0 {
		l.HitPercent = 100 * float64(hits) / float64(hits+misses)
	}
	if s.Disk != nil && prev.Disk != nil {
		l.DiskHitPercent = 0
		if dh, dm := s.Disk.Hits-prev.Disk.Hits, s.Disk.Misses-prev.Disk.Misses; dh+dm > 0 {
			l.DiskHitPercent = 100 * float64(dh) / float64(dh+dm)
		}
	}
	for _, st := range s.Stores {
		l.StoreStates = append(l.StoreStates, st.State)
	}
	return l
}

func (l statsLine) print(out io.Writer) error {
	disk := "-"
	if l.DiskHitPercent >= 0 {
		disk = fmt.Sprintf("%.1f", l.DiskHitPercent)
	}
	stores := ""
	for i, state := range l.StoreStates {
		mark := "+"
		if state != "healthy" {
			mark = "DOWN"
		}
		stores += fmt.Sprintf(" %d:%s", i, mark)
	}
	fmt.Fprintf(out, "%7.0fs %10.1f %6.1f %6s %10.1f %8.2f %8d %9.2f %8d %6d %6d %s\n",
		l.UptimeSeconds, l.MBPerSecond, l.HitPercent, disk, l.LeadMB, l.LeadSeconds, l.Stalls, l.StallSeconds,
		l.DegradedReads, l.ChecksumFailures, l.HedgedReads, stores)
	printAnomalies(out, l.NewAnomalies)
	return nil
}

func runStats(ctx context.Context, pr *printer, mountpoint string, count int, interval time.Duration) error {
	prev, err := readStats(mountpoint)
	if err != nil {
		return err
	}
	if !pr.json {
		fmt.Fprintf(pr.out, "%8s %10s %6s %6s %10s %8s %8s %9s %8s %6s %6s  stores\n",
			"uptime", "MB/s", "hit%", "disk%", "lead MB", "lead s", "stalls", "stall s", "degraded", "csum", "hedged")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	// The totals since the mount started close the output, however it ends.
	defer func() {
		pr.line(statsTotals{prev}, func(out io.Writer) error { printTotals(out, prev); return nil })
	}()
	for i := 0; count == 0 || i < count; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s, err := readStats(mountpoint)
		if err != nil {
			return err
		}
		l := newStatsLine(prev, s)
		if err := pr.line(l, l.print); err != nil {
			return err
		}
		prev = s
	}
	return nil
}

// printTotals prints the mount's counters since it started.
func printTotals(out io.Writer, s metrics.Snapshot) {
	hit := 0.0
	if s.CacheHits+s.CacheMisses > 0 {
		hit = 100 * float64(s.CacheHits) / float64(s.CacheHits+s.CacheMisses)
	}
	fmt.Fprintf(out, "total since mount (%.0fs): %s served (%.1f MB/s), hit %.1f%%, %d stalls (%.2fs), %d degraded reads, %d checksum failures, %d hedged reads\n",
		s.UptimeSeconds, humanize.IBytes(uint64(max(s.BytesServed, 0))), float64(s.BytesServed)/1e6/max(s.UptimeSeconds, 1e-9), hit,
		s.Stalls, s.StallSeconds, s.DegradedReads, s.ChecksumFailures, s.HedgedReads)
	printGETs(out, s)
	if len(s.Anomalies) == 0 {
		fmt.Fprintln(out, "anomalies now: none")
	}
	printAnomalies(out, s.Anomalies)
	if s.ShardsRead > 0 {
		var hot []string
		for _, h := range s.HotShards {
			hot = append(hot, fmt.Sprintf("%d (%s)", h.Shard, humanize.IBytes(uint64(h.Bytes))))
		}
		shards := "shards"
		if s.ShardsRead == 1 {
			shards = "shard"
		}
		fmt.Fprintf(out, "hottest of %d %s read: %s; store bytes, most over mean: %.2f\n", s.ShardsRead, shards, strings.Join(hot, ", "), s.StoreSkew)
	}
	var rebuilt []string
	for i, st := range s.Stores {
		if st.Degraded > 0 {
			rebuilt = append(rebuilt, fmt.Sprintf("store %d (%s) in %d", i, st.Name, st.Degraded))
		}
	}
	if len(rebuilt) > 0 {
		fmt.Fprintf(out, "degraded reads rebuilt the fragments of %s\n", strings.Join(rebuilt, ", "))
	}
	if s.BytesFetched > 0 {
		fmt.Fprintf(out, "fetched from the stores: %s (%.2f× the bytes served); chunks evicted unread: %d\n",
			humanize.IBytes(uint64(s.BytesFetched)), s.ReadAmplification, s.CacheEvictedUnread)
	}
	for _, r := range s.Ranks {
		fmt.Fprintf(out, "rank %d: epoch %d, %d batches served, %s ready ahead, reads waited %.2fs\n",
			r.Rank, r.Epoch, r.BatchesServed, humanize.IBytes(uint64(max(r.LeadBytes, 0))), r.WaitSeconds)
	}
}

// newAnomalies are the anomalies of now that were not active before.
func newAnomalies(before, now []metrics.Anomaly) []metrics.Anomaly {
	out := []metrics.Anomaly{}
	for _, a := range now {
		if !slices.ContainsFunc(before, func(b metrics.Anomaly) bool { return b.Kind == a.Kind && b.Subject == a.Subject }) {
			out = append(out, a)
		}
	}
	return out
}

// printAnomalies prints anomalies, each with its fix.
func printAnomalies(out io.Writer, anomalies []metrics.Anomaly) {
	for _, a := range anomalies {
		fmt.Fprintf(out, "anomaly %s since %s: %s. Fix: %s\n", a.Kind, a.Since.Format(time.TimeOnly), a.Reason, a.Fix)
	}
}

// printGETs prints the GETs sent to the stores by why, and per GB served:
// object stores bill per request.
func printGETs(out io.Writer, s metrics.Snapshot) {
	var total int64
	var parts []string
	for k := range erasure.NumReadKinds {
		n := s.GETsByKind[k.String()]
		total += n
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	perGB := "-"
	if s.BytesServed > 0 {
		perGB = fmt.Sprintf("%.0f", float64(total)/(float64(s.BytesServed)/1e9))
	}
	fmt.Fprintf(out, "GETs to the stores: %d (%s); %s per GB served\n", total, strings.Join(parts, ", "), perGB)
}
