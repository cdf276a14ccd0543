package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasequota/leasequota/telemetry"
)

// TestZeroConfigTakesTheGlobals: New with a zero Config takes the otel
// globals and slog.Default, as Config says; it dereferenced the nil
// MeterProvider.
func TestZeroConfigTakesTheGlobals(t *testing.T) {
	tel, err := telemetry.New(telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tel.Close()
}

// TestDecisionsMetricNeverFalls: a decision count that falls back for a
// moment (a call's decision replaced by a later one and uncounted) is
// reported as the largest seen, so that the cumulative counter does not
// read as a reset; it follows the count again once the count passes it.
func TestDecisionsMetricNeverFalls(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	denied := int64(5)
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, Collect: func(s *telemetry.Snapshot) {
		s.Reasons = []string{"exhausted"}
		s.Denied = append(s.Denied, denied)
		s.Allowed = append(s.Allowed, 0)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	read := func() int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "leasequota.decisions" {
					for _, dp := range sum.DataPoints {
						return dp.Value
					}
				}
			}
		}
		t.Fatal("no leasequota.decisions data point")
		return 0
	}
	for _, step := range []struct{ count, want int64 }{{5, 5}, {4, 5}, {5, 5}, {7, 7}} {
		denied = step.count
		if got := read(); got != step.want {
			t.Errorf("count %d: reported %d, want %d", step.count, got, step.want)
		}
	}
}

// TestErrorTypePoolExhausted: a call that go-redis fails because its own
// pool had no connection to give (none came back within PoolTimeout, or
// MaxActiveConns are all out) is classed pool_exhausted, as it comes from
// lease.Client (wrapped) or bare; a call whose deadline ran out while it
// waited for one stays a timeout. Before, both pool errors were other.
func TestErrorTypePoolExhausted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{redis.ErrPoolTimeout, "pool_exhausted"},
		{fmt.Errorf("lease: no reply from Redis: %w", redis.ErrPoolTimeout), "pool_exhausted"},
		{redis.ErrPoolExhausted, "pool_exhausted"},
		{fmt.Errorf("lease: acquire: %w", redis.ErrPoolExhausted), "pool_exhausted"},
		{fmt.Errorf("lease: acquire: %w", context.DeadlineExceeded), "timeout"},
	} {
		if got := telemetry.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
