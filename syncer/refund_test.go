package syncer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/telemetry"
)

// queueRefund leases tn's 2 tokens (its burst, MinLease 2), spends them,
// and refunds them while a lease call holds tn's lock: the refund's return
// is queued, and a round that finds tn still locked leaves it queued for
// tn's next plan.
func queueRefund(t *testing.T, s *Syncer, tn *Tenant) {
	t.Helper()
	refillNow(t, s, tn, 2)
	front, clock := tn.Front(), s.Clock()
	if ok, _ := tn.Spend(2); !ok {
		t.Fatalf("the first lease holds %d tokens, want 2", tn.tokens.Load())
	}
	tn.mu.Lock() // a lease call in flight
	if got := s.Refund(tn, 2, front, clock); got != RefundReturned {
		t.Fatalf("Refund while the lock is held: %v, want RefundReturned", got)
	}
	s.Tick(context.Background())
	tn.mu.Unlock()
}

// TestRefundReturnedComesBackWithTheRefill: a refund made while a lease
// call held the tenant's lock is queued as a return, which a round that
// finds the tenant still locked leaves queued. The tenant's next refill
// makes that return before its acquire, and leases the tokens again,
// although its last call found the bucket dry (it refills in 1,000 s): its
// waiting requests need not wait for a round.
func TestRefundReturnedComesBackWithTheRefill(t *testing.T) {
	s, tn, _, _ := drivenTenant(t, Config{Interval: time.Minute}, "ip:a", quota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2, LeaseTTL: 10 * time.Minute})
	ctx := context.Background()
	// A round meanwhile leaves the return queued for the tenant's next
	// plan, which makes it before its acquire.
	queueRefund(t, s, tn)
	if st := s.Stats(); st.Returned+st.Forfeited != 0 {
		t.Fatalf("a round that found the tenant locked made its refund's return: stats %+v", st)
	}
	refillNow(t, s, tn, 2)
	if n := tn.tokens.Load(); n != 2 {
		t.Fatalf("after the refill, ip:a holds %d tokens, want the 2 refunded", n)
	}
	// Credited in whole tokens, rounded down (Redis credits 1.999999999
	// of them): the rest counts as forfeited.
	if st := s.Stats(); st.Returned+st.Forfeited != 2 || st.Returned < 1 || st.Granted != 4 {
		t.Errorf("stats %+v: want the 2 tokens returned (Returned+Forfeited), and 4 granted", st)
	}
	// Made once: a later round has nothing of it to return.
	before := s.Stats().Returned
	s.Tick(ctx)
	if st := s.Stats(); st.Returned != before {
		t.Errorf("a round after the refill returned %d more tokens", st.Returned-before)
	}
	s.Close()
}

// TestQueuedReturnReachesTheMetric: a refund's return made outside a
// round (ahead of the tenant's refill) is counted in
// leasequota.lease.tokens{direction=returned} as in Stats().Returned;
// only rounds' totals reached the metric before.
func TestQueuedReturnReachesTheMetric(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tracenoop.NewTracerProvider(),
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
	ctx := context.Background()
	queueRefund(t, s, tn)
	refillNow(t, s, tn, 2) // makes the return, outside any round
	st := s.Stats()
	if st.Returned < 1 {
		t.Fatalf("stats %+v: the refund's return credited nothing", st)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var returned int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "leasequota.lease.tokens" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := p.Attributes.Value("direction"); v.AsString() == "returned" {
					returned += p.Value
				}
			}
		}
	}
	if returned != st.Returned {
		t.Errorf("lease.tokens{direction=returned} = %d, Stats().Returned = %d: want them equal", returned, st.Returned)
	}
}

// agesSeen is a Store that records the Age of every release it is sent.
type agesSeen struct {
	lease.Store
	ages []time.Duration
}

func (a *agesSeen) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	for _, r := range reqs {
		a.ages = append(a.ages, r.Age)
	}
	return a.Store.ReleaseMany(ctx, reqs)
}

// TestQueuedReturnAgesWhileItWaits: a return left queued (a refund's,
// while its tenant's lease call held the lock) reaches Redis with an Age
// that counts the time it waited, 30 s here: sent with the age it was
// given when queued, a return that names no grant would be credited as if
// its tokens were that much younger.
func TestQueuedReturnAgesWhileItWaits(t *testing.T) {
	now, advance, _, mine, _ := MemstorePair(t)
	rec := &agesSeen{Store: mine}
	cfg := Config{Interval: time.Minute}
	s := New(rec, Options{Planner: NewPlanner(cfg, 1), Now: now, Driven: true})
	defer s.Close()
	q := quota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2, LeaseTTL: 10 * time.Minute}
	tn, err := s.Track("ip:a", q)
	if err != nil {
		t.Fatal(err)
	}
	queueRefund(t, s, tn)
	const waited = 30 * time.Second
	advance(waited)
	refillNow(t, s, tn, 2) // makes the return first
	if len(rec.ages) != 1 {
		t.Fatalf("%d releases sent, want the refund's return", len(rec.ages))
	}
	// Refund reckons the age as the time since the admission (none on
	// this clock) plus a lease lifetime, two intervals and two call
	// timeouts (half an interval each by default); the return must add the
	// 30 s it waited.
	if slack := q.LeaseTTL + 2*cfg.Interval + 2*(cfg.Interval/2); rec.ages[0] < waited+slack {
		t.Errorf("the return reached the store with Age %v, want at least %v: the %v it waited in the queue and Refund's %v", rec.ages[0], waited+slack, waited, slack)
	}
}
