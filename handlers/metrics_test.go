package handlers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flightdeck-ai/flightdeck/executor"
)

// TestMetricsShareARegistry: a service that runs a consumer and an in-process Executor
// registers both sets of metrics on one registry, in either order, and the counter they
// have in common (singleflight_result_write_failure_total) is one collector.
func TestMetricsShareARegistry(t *testing.T) {
	for _, consumerFirst := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("consumer first %v: registering both panicked: %v", consumerFirst, r)
				}
			}()
			if consumerFirst {
				newMetrics(reg)
				executor.NewMetrics(reg)
			} else {
				executor.NewMetrics(reg)
				newMetrics(reg)
			}
		}()
		if a, b := executor.ResultWriteFailures(reg), executor.ResultWriteFailures(reg); a != b {
			t.Errorf("consumer first %v: two collectors for one counter", consumerFirst)
		}
	}
}
