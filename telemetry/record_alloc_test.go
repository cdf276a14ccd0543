package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasequota/leasequota/telemetry"
)

// TestRecordingAllocatesNothingBeyondTheSDK: the package says attribute
// sets are built once, so that recording allocates nothing beyond what
// the SDK does. With the metric SDK (whose Add and Record of a prebuilt
// attribute set allocate nothing once the series exists), the lease
// counts of a round (Leases, Expired) must then allocate nothing; and
// with the no-op TracerProvider, a Redis call and a sync round only the
// Call or Round and what the no-op span costs. Each Add and Record took
// its option in a variadic slice made per call, which escapes through
// the instrument's interface: one allocation each, 5 for a round's
// counts; and each span's options, name and attributes were built per
// call: 8 allocations a call and 9 a round (with failures), against 2.
func TestRecordingAllocatesNothingBeyondTheSDK(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tracenoop.NewTracerProvider(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	counts := func() {
		tel.Leases(1, 2, 3, 4)
		tel.Expired(5)
	}
	counts() // the series exist from here
	if got := testing.AllocsPerRun(100, counts); got != 0 {
		t.Errorf("a round's lease counts (Leases, Expired) allocate %v times, want 0", got)
	}
	ctx := context.Background()
	call := func(op string) func() {
		return func() {
			_, c := tel.StartCall(ctx, op, 1)
			c.End(nil)
		}
	}
	noop := tracenoop.NewTracerProvider().Tracer("")
	span := testing.AllocsPerRun(100, func() {
		_, s := noop.Start(ctx, "span")
		s.End()
	})
	for _, urgent := range []bool{false, true} {
		round := func() {
			_, r := tel.StartRound(ctx, urgent)
			r.Add(telemetry.Round{Tenants: 1, Calls: 1, Failed: 1})
			r.End()
		}
		// The Round (with its attributes), and its no-op span's.
		if got, want := testing.AllocsPerRun(100, round), span+1; got > want {
			t.Errorf("a round (urgent %v) allocates %v times, want at most %v (the Round, and a no-op span's %v)", urgent, got, want, span)
		}
	}
	for _, op := range []string{telemetry.OpAcquire, telemetry.OpRelease} {
		call(op)()
		// The Call itself, and its no-op span's.
		if got, want := testing.AllocsPerRun(100, call(op)), span+1; got > want {
			t.Errorf("a successful %s call allocates %v times, want at most %v (the Call, and a no-op span's %v)", op, got, want, span)
		}
	}
}

// TestCallSpanAttributes: a Redis call's span, its options built once in
// New and its pipeline size set after it starts, has the name, kind and
// attributes docs/metrics.md lists.
func TestCallSpanAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	for _, tc := range []struct {
		op   string
		size int
	}{{telemetry.OpAcquire, 1}, {telemetry.OpRelease, 7}, {"other", 3}} {
		_, c := tel.StartCall(context.Background(), tc.op, tc.size)
		c.End(nil)
		spans := rec.Ended()
		s := spans[len(spans)-1]
		if s.Name() != "leasequota.redis "+tc.op || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %q kind %v, want %q client", s.Name(), s.SpanKind(), "leasequota.redis "+tc.op)
		}
		want := attribute.NewSet(attribute.String("db.system.name", "redis"), attribute.String("operation", tc.op),
			attribute.Int("leasequota.pipeline.size", tc.size))
		if got := attribute.NewSet(s.Attributes()...); !got.Equals(&want) {
			t.Errorf("%s span attributes %v, want %v", tc.op, got.ToSlice(), want.ToSlice())
		}
	}
}

// TestRoundSpanAttributes: a sync round's span, its options built once
// in New and its attributes set at End from the Round's own block, has
// the attributes and status docs/metrics.md lists, and its links.
func TestRoundSpanAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	_, req := tp.Tracer("test").Start(context.Background(), "request")
	req.End()
	for _, failed := range []int{0, 2} {
		_, r := tel.StartRound(context.Background(), failed > 0, trace.Link{SpanContext: req.SpanContext()})
		r.Add(telemetry.Round{Tenants: 3, Requested: 4, Granted: 5, Returned: 6, Calls: 7, Failed: failed})
		r.End()
		spans := rec.Ended()
		s := spans[len(spans)-1]
		kv := []attribute.KeyValue{attribute.Bool("leasequota.urgent", failed > 0), attribute.Int("leasequota.tenants", 3),
			attribute.Int64("leasequota.tokens.requested", 4), attribute.Int64("leasequota.tokens.granted", 5),
			attribute.Int64("leasequota.tokens.returned", 6), attribute.Int("leasequota.redis.calls", 7)}
		wantCode := codes.Unset
		if failed > 0 {
			kv = append(kv, attribute.Int("leasequota.failed", failed))
			wantCode = codes.Error
		}
		want := attribute.NewSet(kv...)
		if got := attribute.NewSet(s.Attributes()...); s.Name() != "leasequota.sync" || s.SpanKind() != trace.SpanKindInternal || !got.Equals(&want) {
			t.Errorf("round span %q %v attributes %v, want leasequota.sync internal %v", s.Name(), s.SpanKind(), got.ToSlice(), want.ToSlice())
		}
		if s.Status().Code != wantCode {
			t.Errorf("round span (failed %d) status %v, want %v", failed, s.Status().Code, wantCode)
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != req.SpanContext().SpanID() {
			t.Errorf("round span links %v, want the request's", s.Links())
		}
	}
}

// TestFailedCallSpanRecordsTheError: a failed Redis call's span records
// its error as OpenTelemetry's semantic conventions for errors on spans
// ask (general/recording-errors, v1.44.0): status Error whose
// description is the error's message, and the error.type the error
// counter has; and, as docs/metrics.md says, no exception event
// (Span.RecordError), which those conventions deprecate.
func TestFailedCallSpanRecordsTheError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	for _, fail := range []error{
		fmt.Errorf("lease: no reply from Redis: %w", context.DeadlineExceeded),
		fmt.Errorf("lease: no reply from Redis: %w", redis.ErrPoolTimeout),
		errors.New("circuit breaker is open"),
		errors.New("OOM command not allowed when used memory > 'maxmemory'"),
	} {
		_, c := tel.StartCall(context.Background(), telemetry.OpAcquire, 2)
		c.End(fail)
		spans := rec.Ended()
		s := spans[len(spans)-1]
		if st := s.Status(); st.Code != codes.Error || st.Description != fail.Error() {
			t.Errorf("span of a call failing with %q: status %v %q, want Error with the error's message", fail, st.Code, st.Description)
		}
		want := attribute.String("error.type", telemetry.ErrorType(fail))
		if !slices.Contains(s.Attributes(), want) {
			t.Errorf("span of a call failing with %q: attributes %v, want %v among them", fail, s.Attributes(), want)
		}
		if ev := s.Events(); len(ev) != 0 {
			t.Errorf("span of a call failing with %q: events %v, want none (docs/metrics.md)", fail, ev)
		}
	}
}
