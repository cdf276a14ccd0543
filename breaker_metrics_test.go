package leasequota_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestBreakerRefusalsAreNotRoundTrips: during an outage the metrics count
// the lease requests and round trips that reached Redis, not the calls the
// circuit breaker refused (those count as errors of type breaker_open
// only). They counted them all: lease.requests 1,255 where 169 reached
// the store, redis.duration 144 round trips where 21 were made.
func TestBreakerRefusalsAreNotRoundTrips(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	// The store refuses every acquire at once (a Redis that refuses
	// connections), counting the tenants' requests that reached it.
	var requests atomic.Int64
	store := faultstore.New(memstore.New())
	refusal := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	store.SetHook(func(_ context.Context, c faultstore.Call) error {
		if c.Op != faultstore.OpAcquire {
			return nil
		}
		requests.Add(int64(len(c.Tenants)))
		return refusal
	})
	l, err := leasequota.NewWithStore(store,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}),
		leasequota.WithMeterProvider(mp), leasequota.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	// Requests of 50 tenants for a second (paced, the load), past the
	// breaker's opening.
	end := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(end); i++ {
		l.Allow(fmt.Sprintf("t%d", i%50))
		time.Sleep(time.Millisecond)
	}
	l.Close(context.Background())
	m := metrics(t, reader)
	var sent, trips, refusedErrs int64
	for _, p := range m["leasequota.lease.requests"].Data.(metricdata.Sum[int64]).DataPoints {
		sent += p.Value
	}
	for _, p := range m["leasequota.redis.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
		if v, _ := p.Attributes.Value("operation"); v.AsString() == "acquire" {
			trips += int64(p.Count)
		}
	}
	for _, p := range m["leasequota.redis.errors"].Data.(metricdata.Sum[int64]).DataPoints {
		if v, _ := p.Attributes.Value("error.type"); v.AsString() == "breaker_open" {
			refusedErrs += p.Value
		}
	}
	if refusedErrs == 0 {
		t.Fatalf("no call was refused by the breaker: the test needs an outage long enough to open it")
	}
	if sent != requests.Load() {
		t.Errorf("leasequota.lease.requests = %d, but %d requests reached the store", sent, requests.Load())
	}
	// The calls made to the store are the acquires it refused.
	calls, _ := store.Calls(faultstore.OpAcquire)
	if trips != calls || l.Stats().Calls != calls {
		t.Errorf("leasequota.redis.duration counts %d acquires and Stats().Calls %d, but %d reached the store", trips, l.Stats().Calls, calls)
	}
}
