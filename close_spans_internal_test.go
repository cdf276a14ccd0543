package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasequota/leasequota/lease/memstore"
)

// TestCloseSharesEndInItsSpan: Close's Redis calls are children of its
// leasequota.sync span, as docs/metrics.md says of every Redis round
// trip, and counted in its leasequota.redis.calls. The acquires that end
// the rate shares held (WithRateShares) were made before the span began:
// root spans of their own, in no sync span's count (of calls, and of
// lease requests: a round's share ends count as its lease requests).
func TestCloseSharesEndInItsSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		defer tp.Shutdown(context.Background())
		l, err := NewWithStore(memstore.New(), WithRateShares(time.Second, 0), WithTracerProvider(tp),
			WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
			WithDefaultQuota(Quota{Rate: 20, Burst: 20}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		deadline := time.Now().Add(time.Minute)
		for l.sync.Stats().Dripped == 0 { // a share's tokens came due: it holds one
			if time.Now().After(deadline) {
				t.Fatalf("no rate share after a minute of over-demand: %+v", l.sync.Stats())
			}
			for range 4 {
				l.AllowN(ctx, "a", 1)
			}
			time.Sleep(10 * time.Millisecond) // 400 requests a second against a rate of 20
			synctest.Wait()
		}
		before := len(spans.Ended())
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		var syncs, calls, shareEnds int
		var counted, tenants, ended int64
		for _, s := range spans.Ended()[before:] {
			switch s.Name() {
			case "leasequota.sync":
				syncs++
				for _, kv := range s.Attributes() {
					switch kv.Key {
					case "leasequota.redis.calls":
						counted += kv.Value.AsInt64()
					case "leasequota.tenants":
						tenants += kv.Value.AsInt64()
					}
				}
			case "leasequota.redis acquire", "leasequota.redis release":
				calls++
				if s.Name() == "leasequota.redis acquire" {
					shareEnds++
					for _, kv := range s.Attributes() {
						if kv.Key == "leasequota.pipeline.size" {
							ended += kv.Value.AsInt64()
						}
					}
				}
				if !s.Parent().IsValid() {
					t.Errorf("Close's %s span has no parent: not in Close's leasequota.sync span", s.Name())
				}
			}
		}
		if shareEnds == 0 {
			t.Fatal("Close ended no rate share")
		}
		if syncs != 1 || counted != int64(calls) {
			t.Errorf("Close made %d leasequota.sync spans counting %d Redis calls, and %d Redis call spans; want 1 span counting them all", syncs, counted, calls)
		}
		if tenants != ended {
			t.Errorf("Close's leasequota.sync span counts %d lease requests, its acquires ended %d tenants' shares", tenants, ended)
		}
	})
}
