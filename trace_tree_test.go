package leasequota_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// checkSpanTree checks what docs/metrics.md says of the spans rec
// recorded, besides the test's own spans named own: every span started
// has ended, every lease call's span is a child of a leasequota.sync
// span, and each sync span's leasequota.redis.calls counts its children
// but those of calls the circuit breaker refused. It returns the sync
// spans that link to a span.
func checkSpanTree(t *testing.T, rec *tracetest.SpanRecorder, own string) (syncs, linked int) {
	t.Helper()
	ended := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		ended[s.SpanContext().SpanID()] = s
	}
	for _, s := range rec.Started() {
		if _, ok := ended[s.SpanContext().SpanID()]; !ok {
			t.Errorf("span %q never ended", s.Name())
		}
	}
	calls := map[trace.SpanID]int64{}
	for _, s := range ended {
		switch s.Name() {
		case own, "leasequota.sync":
			continue
		}
		p, ok := ended[s.Parent().SpanID()]
		if !ok || p.Name() != "leasequota.sync" {
			t.Errorf("%s span is not a child of a leasequota.sync span", s.Name())
			continue
		}
		refused := false
		for _, kv := range s.Attributes() {
			refused = refused || kv.Key == "error.type" && kv.Value.AsString() == "breaker_open"
		}
		if !refused {
			calls[p.SpanContext().SpanID()]++
		}
	}
	for id, s := range ended {
		if s.Name() != "leasequota.sync" {
			continue
		}
		syncs++
		if len(s.Links()) > 0 {
			linked++
		}
		if got := spanInt(s, "leasequota.redis.calls"); got != calls[id] {
			t.Errorf("a leasequota.sync span counts %d Redis calls, and has %d calls' spans", got, calls[id])
		}
	}
	return syncs, linked
}

// TestSpanTreeThroughAnOutageAndClose: requests in spans of their own, on
// two tenants (AllowN with WithMaxWait, WaitN with a short ctx), through
// an outage and Close with an acquire hanging on a Redis that answers
// nothing; every span ends, in the tree docs/metrics.md describes, and
// the requests' refills link to them.
func TestSpanTreeThroughAnOutageAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		store := faultstore.New(memstore.New())
		l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)), leasequota.WithTracerProvider(tp),
			leasequota.WithRefreshInterval(100*time.Millisecond), leasequota.WithMaxWait(50*time.Millisecond),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 20}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, req := tp.Tracer("test").Start(context.Background(), "request")
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := range 300 {
					switch {
					case i == 0 && j == 100:
						store.SetDown(nil)
					case i == 0 && j == 200:
						store.SetUp()
					}
					l.AllowN(ctx, "a", 3)
					if j%10 == 0 {
						wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
						l.WaitN(wctx, "b", 5)
						cancel()
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		store.SetHook(faultstore.Hang(faultstore.OpAcquire))
		go l.AllowN(ctx, "new", 1) // its cold start's acquire hangs until its deadline
		time.Sleep(time.Millisecond)
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		req.End()
		synctest.Wait()
		syncs, linked := checkSpanTree(t, rec, "request")
		if linked == 0 {
			t.Errorf("none of %d leasequota.sync spans links to the requests' span", syncs)
		}
		t.Logf("%d leasequota.sync spans, %d linked to the requests' span", syncs, linked)
	})
}
