package leasequota_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// spanInt is the int attribute k of s (0 when s has none).
func spanInt(s sdktrace.ReadOnlySpan, k string) int64 {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value.AsInt64()
		}
	}
	return 0
}

// TestRefusedCallSpan pins what docs/metrics.md says of a lease call the
// open circuit breaker refused: it has a leasequota.redis span of its
// own, status Error with error.type breaker_open, in its refill's
// leasequota.sync span, which counts it in neither leasequota.redis.calls
// nor leasequota.tenants (it never reached Redis) but in
// leasequota.failed, with status Error. And that the syncer's other Redis
// calls (the read of the quota version, which the loop made all along)
// have no span: every span is a sync round's or a lease call's.
func TestRefusedCallSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		store := faultstore.New(memstore.New())
		l := newLimiter(t, store, leasequota.WithTracerProvider(tp), leasequota.WithFailureMode(leasequota.FailClosed),
			leasequota.WithRefreshInterval(100*time.Millisecond), leasequota.WithColdStartWait(50*time.Millisecond),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 20}))
		ctx := context.Background()
		l.AllowN(ctx, "warm", 1)
		store.SetDown(nil)
		deadline := time.Now().Add(time.Minute)
		for i := 0; !l.Degraded(); i++ {
			if time.Now().After(deadline) {
				t.Fatal("not degraded a minute after the store went down")
			}
			l.AllowN(ctx, fmt.Sprint("t", i), 1) // a new tenant's cold start: a refill, which fails
			time.Sleep(10 * time.Millisecond)
		}
		before := len(rec.Ended())
		if d := l.AllowN(ctx, "new", 1); d.Allowed {
			t.Fatalf("a new FailClosed tenant admitted with the breaker open: %+v", d)
		}
		var refused sdktrace.ReadOnlySpan
		for _, s := range rec.Ended()[before:] {
			if s.Name() != "leasequota.redis acquire" {
				continue
			}
			for _, kv := range s.Attributes() {
				if kv.Key == "error.type" && kv.Value.AsString() == "breaker_open" {
					refused = s
				}
			}
		}
		if refused == nil {
			t.Fatal("the refill the open breaker refused has no leasequota.redis acquire span with error.type breaker_open")
		}
		if refused.Status().Code != codes.Error {
			t.Errorf("refused call's span status %v, want Error", refused.Status())
		}
		var round sdktrace.ReadOnlySpan
		for _, s := range rec.Ended()[before:] {
			if s.SpanContext().SpanID() == refused.Parent().SpanID() {
				round = s
			}
		}
		if round == nil || round.Name() != "leasequota.sync" {
			t.Fatalf("refused call's parent %v is not a leasequota.sync span", refused.Parent().SpanID())
		}
		if c, n, f := spanInt(round, "leasequota.redis.calls"), spanInt(round, "leasequota.tenants"), spanInt(round, "leasequota.failed"); c != 0 || n != 0 || f != 1 {
			t.Errorf("refill's span: redis.calls %d, tenants %d, failed %d; want 0, 0, 1", c, n, f)
		}
		if round.Status().Code != codes.Error {
			t.Errorf("refill's span status %v, want Error", round.Status())
		}
		if made, _ := store.Calls(faultstore.OpVersion); made == 0 {
			t.Fatal("the loop read the quota version never: the check below checks nothing")
		}
		store.SetUp() // for Close's returns
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "leasequota.sync", "leasequota.redis acquire", "leasequota.redis release":
			default:
				t.Errorf("span %q: the syncer's only spans are sync rounds' and lease calls'", s.Name())
			}
		}
	})
}
