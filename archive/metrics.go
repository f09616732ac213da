package archive

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the archive's Prometheus metrics.
type Metrics struct {
	writes     *prometheus.CounterVec
	rehydrates *prometheus.CounterVec
	errors     *prometheus.CounterVec
	writeTime  prometheus.Histogram
	spooled    prometheus.GaugeFunc
}

// newMetrics makes the metrics and registers them with reg, unless reg is nil. spooled
// reports the outcomes waiting in the spool.
func newMetrics(reg prometheus.Registerer, spooled func() float64) (*Metrics, error) {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_archive_writes_total",
			Help: "Outcomes written to the archive (result written), refused by a newer row's token (refused), or spooled while the archive was away (spooled)."},
			[]string{"result"}),
		rehydrates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_archive_rehydrates_total",
			Help: "Flights answered from the archive instead of a model call, by stage and archived status."},
			[]string{"stage", "status"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flightdeck_archive_errors_total",
			Help: "Archive operations that failed, by operation (write, lookup, claim, fence, purge)."}, []string{"op"}),
		writeTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flightdeck_archive_write_seconds",
			Help: "Duration of one batched archive write.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		spooled: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flightdeck_archive_spooled_outcomes",
			Help: "Outcomes waiting in the local spool for the archive to answer."}, spooled),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.writes, m.rehydrates, m.errors, m.writeTime, m.spooled} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Rehydrated counts a flight answered from the archive.
func (m *Metrics) Rehydrated(stage, status string) { m.rehydrates.WithLabelValues(stage, status).Inc() }
