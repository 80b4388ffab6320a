package heal

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the healer's Prometheus series, labelled by dataset (a
// bounded set: the datasets a healer serves).
type Metrics struct {
	margin        *prometheus.GaugeVec
	parity        *prometheus.GaugeVec
	position      *prometheus.GaugeVec
	shardsChecked *prometheus.CounterVec
	bytesChecked  *prometheus.CounterVec
	rebuilt       *prometheus.CounterVec
	cycles        *prometheus.CounterVec
}

// NewMetrics registers the healer's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	lbl := []string{"dataset"}
	m := &Metrics{
		margin: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardfs_heal_redundancy_margin",
			Help: "How many more stores the dataset can lose: m minus the most fragments any shard is missing, as last checked; 0 means the next failure loses data, below 0 that some has been lost."}, lbl),
		parity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardfs_heal_parity",
			Help: "The dataset's m: the margin when every fragment is in place."}, lbl),
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardfs_heal_position_shard",
			Help: "The first shard of the scrub's next step in this cycle."}, lbl),
		shardsChecked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardfs_heal_shards_checked_total",
			Help: "Shards whose every fragment the scrub read and checked."}, lbl),
		bytesChecked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardfs_heal_checked_bytes_total",
			Help: "Fragment bytes the scrub read and checked."}, lbl),
		rebuilt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardfs_heal_objects_written_total",
			Help: "Objects the healer wrote: rebuilt fragments and mended metadata copies."}, lbl),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardfs_heal_cycles_total",
			Help: "Whole scrub cycles completed."}, lbl),
	}
	reg.MustRegister(m.margin, m.parity, m.position, m.shardsChecked, m.bytesChecked, m.rebuilt, m.cycles)
	return m
}
