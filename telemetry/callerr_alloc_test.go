package telemetry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasequota/leasequota/telemetry"
)

// TestFailedCallRecordsWithoutAllocating: the package says attribute
// sets are built once, so that recording allocates nothing beyond what
// the SDK does. With no-op providers (the SDK doing nothing), a failed
// Redis call may then allocate only what a successful one does (the
// error counter's Add takes its options prebuilt, as the duration's Record
// does: TestRecordingAllocatesNothingBeyondTheSDK), and what the error's
// own text and type cost. During an outage every call
// fails, with seven breaker refusals for each call sent. The error's
// attributes were built per failure: 14 and 15 allocations against 8.
func TestFailedCallRecordsWithoutAllocating(t *testing.T) {
	tel, err := telemetry.New(telemetry.Config{
		MeterProvider:  metricnoop.NewMeterProvider(),
		TracerProvider: tracenoop.NewTracerProvider(),
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	ctx := context.Background()
	call := func(op string, err error) float64 {
		return testing.AllocsPerRun(100, func() {
			_, c := tel.StartCall(ctx, op, 1)
			c.End(err)
		})
	}
	for _, tc := range []struct {
		err   error
		extra float64 // allocations beyond a success's
	}{
		{errors.New("circuit breaker is open"), 0},
		{context.DeadlineExceeded, 1},
		// A sentinel errors.Is finds before the net.Error look-up, its
		// attributes prebuilt as every type's: nothing more.
		{redis.ErrPoolTimeout, 0},
		// ErrorType asks errors.As whether it is a net.Error, whose
		// target escapes: one more.
		{errors.New("leasequota: bad request"), 2},
	} {
		for _, op := range []string{telemetry.OpAcquire, telemetry.OpRelease} {
			_, c := tel.StartCall(ctx, op, 1)
			c.End(tc.err) // logs the error: the log is throttled to once a second after it
			ok := call(op, nil)
			if got := call(op, tc.err); got > ok+tc.extra {
				t.Errorf("%s call failing with %q (%s): %v allocations, want at most %v (a success: %v)",
					op, tc.err, telemetry.ErrorType(tc.err), got, ok+tc.extra, ok)
			}
		}
	}
}

// TestFailedCallErrorAttributes: the error counter's data point of a
// failed call carries its operation, its error.type and Config's
// attributes, from the sets New builds.
func TestFailedCallErrorAttributes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.New(telemetry.Config{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Attributes:    []attribute.KeyValue{attribute.String("leasequota.limiter", "x")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	_, c := tel.StartCall(context.Background(), telemetry.OpRelease, 3)
	c.End(context.DeadlineExceeded)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(attribute.String("leasequota.limiter", "x"),
		attribute.String("operation", telemetry.OpRelease), attribute.String("error.type", "timeout"))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "leasequota.redis.errors" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&want) && dp.Value == 1 {
					return
				}
				t.Errorf("data point %v = %d", dp.Attributes.ToSlice(), dp.Value)
			}
		}
	}
	t.Errorf("no leasequota.redis.errors data point %v = 1", want.ToSlice())
}
