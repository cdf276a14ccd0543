package syncer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/telemetry"
)

// TestQueuedReturnInTheRefillSpan: the return of a refund that a refill
// makes ahead of its acquire is one of the refill's Redis round trips, so
// its leasequota.redis release span is a child of the refill's
// leasequota.sync span (as docs/metrics.md says of every Redis round
// trip), which counts it in leasequota.redis.calls and its tokens in
// leasequota.tokens.returned. It was made before that span began: a root
// span of its own, in no sync span's counts.
func TestQueuedReturnInTheRefillSpan(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tp,
		Logger: slog.New(slog.DiscardHandler), Collect: func(*telemetry.Snapshot) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	now, _, _, mine, _ := MemstorePair(t)
	s := New(mine, Options{Planner: NewPlanner(Config{Interval: time.Minute}, 1), Now: now, Driven: true, Telemetry: tel})
	defer s.Close()
	tn, err := s.Track("ip:a", quota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2, LeaseTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	queueRefund(t, s, tn)
	before, retBefore := len(spans.Ended()), s.Stats().Returned
	refillNow(t, s, tn, 2) // makes the return, then the acquire
	returned := s.Stats().Returned - retBefore
	if returned < 1 {
		t.Fatalf("stats %+v: the refund's return credited nothing", s.Stats())
	}
	ended := spans.Ended()[before:]
	syncs := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range ended {
		if sp.Name() == "leasequota.sync" {
			syncs[sp.SpanContext().SpanID()] = sp
		}
	}
	if len(syncs) != 1 {
		t.Fatalf("the refill made %d leasequota.sync spans, want 1", len(syncs))
	}
	calls := 0
	for _, sp := range ended {
		switch sp.Name() {
		case "leasequota.redis acquire", "leasequota.redis release":
			calls++
			if _, ok := syncs[sp.Parent().SpanID()]; !sp.Parent().IsValid() || !ok {
				t.Errorf("the refill's %s span is not a child of its leasequota.sync span (parent %v)", sp.Name(), sp.Parent().SpanID())
			}
		}
	}
	if calls != 2 {
		t.Errorf("the refill made %d Redis call spans, want 2 (the return, the acquire)", calls)
	}
	for _, sp := range syncs {
		for _, kv := range sp.Attributes() {
			switch kv.Key {
			case "leasequota.redis.calls":
				if got := kv.Value.AsInt64(); got != int64(calls) {
					t.Errorf("the refill's leasequota.sync span counts %d Redis calls, want %d", got, calls)
				}
			case "leasequota.tokens.returned":
				if got := kv.Value.AsInt64(); got != returned {
					t.Errorf("the refill's leasequota.sync span counts %d tokens returned, want %d", got, returned)
				}
			}
		}
	}
}
