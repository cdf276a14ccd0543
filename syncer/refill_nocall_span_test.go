package syncer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/telemetry"
)

// TestRefillWithoutACallHasNoSpan pins what docs/metrics.md says of an
// urgent refill's leasequota.sync span: the refill that calls Redis has
// one, linked to the span of the request that asked for it; a refill whose
// plan makes no call (here the tenant already holds what the request
// needs) has none, so the request is in no span's links.
func TestRefillWithoutACallHasNoSpan(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tp, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	now, _, _, mine, _ := MemstorePair(t)
	s := New(mine, Options{Planner: NewPlanner(Config{Interval: time.Minute}, 1), Now: now, Driven: true, Telemetry: tel})
	defer s.Close()
	tn, err := s.Track("a", quota.Quota{Rate: 0.001, Burst: 10, MinLease: 2, MaxLease: 2, LeaseTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// refill makes a refill for a request in a span of its own and returns
	// the spans the refill ended.
	refill := func() []sdktrace.ReadOnlySpan {
		t.Helper()
		ctx, req := tp.Tracer("test").Start(context.Background(), "request")
		before := len(spans.Ended())
		ch := s.Refill(ctx, tn, 1)
		s.Refills(context.Background())
		s.Deliver()
		if r := <-ch; r.Err != nil {
			t.Fatalf("refill: %v", r.Err)
		}
		ended := spans.Ended()[before:]
		req.End()
		for _, sp := range ended {
			if sp.Name() == "leasequota.sync" && (len(sp.Links()) != 1 || sp.Links()[0].SpanContext.SpanID() != req.SpanContext().SpanID()) {
				t.Errorf("the refill's span has links %v, want the request's span only", sp.Links())
			}
		}
		return ended
	}
	if got := refill(); len(got) != 2 {
		t.Fatalf("the first refill ended %d spans, want 2 (leasequota.sync, its acquire)", len(got))
	}
	if held := tn.tokens.Load(); held < 1 {
		t.Fatalf("the first refill leased %d tokens, want the request's 1 at least", held)
	}
	if got := refill(); len(got) != 0 {
		t.Errorf("a refill of a tenant that holds what the request needs (no call) ended %d spans, want 0", len(got))
	}
}
