package leasequota_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// checkMetrics checks that the metrics say what Stats says: each
// decision series its count, the token directions Stats' totals, and the
// tenants and utilization gauges what they are made of.
func checkMetrics(t *testing.T, l *leasequota.Limiter, reader *sdkmetric.ManualReader) {
	t.Helper()
	m := metrics(t, reader)
	st := l.Stats()
	for r, o := range st.Decisions {
		for _, c := range []struct {
			outcome string
			n       int64
		}{{"allowed", o.Allowed}, {"denied", o.Denied}} {
			got := sumWhere(t, m["leasequota.decisions"], attribute.String("reason", r.String()), attribute.String("outcome", c.outcome))
			if got != c.n {
				t.Errorf("leasequota.decisions{reason=%s,outcome=%s} = %d, Stats says %d", r, c.outcome, got, c.n)
			}
		}
	}
	for _, c := range []struct {
		dir  string
		want int64
	}{{"granted", st.Granted}, {"returned", st.Returned}, {"expired", st.Expired}} {
		if got := sumWhere(t, m["leasequota.lease.tokens"], attribute.String("direction", c.dir)); got != c.want {
			t.Errorf("leasequota.lease.tokens{direction=%s} = %d, Stats says %d", c.dir, got, c.want)
		}
	}
	if got, want := sumWhere(t, m["leasequota.tenants"]), int64(l.Tenants()); got != want {
		t.Errorf("leasequota.tenants = %d, Tenants() = %d", got, want)
	}
	in, returned, forfeited, held := leasequota.LeaseTokens(l)
	if u := m["leasequota.lease.utilization"].Data.(metricdata.Gauge[float64]).DataPoints; len(u) != 1 ||
		u[0].Value != float64(max(in-returned-forfeited-held, 0))/float64(in) {
		t.Errorf("leasequota.lease.utilization = %+v, want (%d - %d - %d - %d) / %d", u, in, returned, forfeited, held, in)
	}
}

// TestAccountingIdentities drives a limiter through the rare paths of its
// accounting (multi-tenant give-backs, refunds, WaitN timeouts, an
// outage under each failure mode, evictions with tokens held, Close)
// and checks at quiescent points that every token that came to the
// leases is spent, returned, forfeited or held, and that every decision
// is counted once.
func TestAccountingIdentities(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []leasequota.Option
	}{
		{"plain", nil},
		{"reservation", []leasequota.Option{leasequota.WithReservation(2 * time.Second)}},
		{"shares", []leasequota.Option{leasequota.WithRateShares(2*time.Second, 0.2)}},
		{"percpu", []leasequota.Option{leasequota.WithPerCPUTokens(1)}},
		{"coldwait", []leasequota.Option{leasequota.WithColdStartWait(5 * time.Millisecond), leasequota.WithMaxWait(20 * time.Millisecond)}},
	} {
		t.Run(c.name, func(t *testing.T) { accountingIdentities(t, c.opts) })
	}
}

func accountingIdentities(t *testing.T, opts []leasequota.Option) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := faultstore.New(memstore.New())
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(ctx)
		l := newLimiter(t, store, append([]leasequota.Option{
			leasequota.WithMeterProvider(mp),
			leasequota.WithMaxTenants(6),
			leasequota.WithIdleTimeout(3 * time.Second),
			leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
				q := leasequota.Quota{Rate: 20, Burst: 40, MinLease: 5}
				switch tenant {
				case "open":
					q.FailureMode = leasequota.FailOpen
				case "local":
					q.FailureMode = leasequota.FailLocal
				case "closed":
					q.FailureMode = leasequota.FailClosed
				case "tiny":
					q = leasequota.Quota{Rate: 0.5, Burst: 5, FailureMode: leasequota.FailOpen}
				}
				return q
			})}, opts...)...)
		t.Cleanup(store.SetUp)
		sl := &spentLedger{l: l}
		one := func(tenant string, n int64) leasequota.Decision {
			return sl.do(t, n, 1, func() leasequota.Decision { return l.AllowN(ctx, tenant, n) })
		}
		all := func(n int64, tenants ...string) leasequota.Decision {
			return sl.do(t, n, len(tenants), func() leasequota.Decision { return l.AllowAll(ctx, n, tenants...) })
		}
		round := func(i int) {
			// A hot tenant, over its quota: its bucket runs dry, which
			// makes reservations and rate shares.
			for range 30 {
				one("hot", 1)
			}
			if i%5 == 2 {
				wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				sl.do(t, 4, 1, func() leasequota.Decision { d, _ := l.WaitN(wctx, "hot", 4); return d })
				cancel()
			}
			for _, tn := range []string{"open", "local", "closed"} {
				one(tn, 1)
				if i%3 == 0 {
					one(tn, 3)
				}
			}
			// An AllowAll admitted by failure modes alone leased
			// nothing: not refundable.
			refund := func(d *leasequota.Decision, tenants ...string) {
				if err := l.Refund(d, tenants...); err != nil && !errors.Is(err, leasequota.ErrNotRefundable) {
					t.Error(err)
				}
			}
			if d := all(1, "open", "local", "tiny"); d.Allowed && i%2 == 0 {
				refund(&d, "open", "local", "tiny")
			}
			if d := one("local", 2); d.Allowed && i%4 == 1 {
				refund(&d)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			sl.do(t, 5, 1, func() leasequota.Decision { d, _ := l.WaitN(wctx, "tiny", 5); return d })
			cancel()
			sl.do(t, 2, 1, func() leasequota.Decision { return l.AllowNWithin(ctx, "closed", 2, 40*time.Millisecond) })
			sl.do(t, 1, 3, func() leasequota.Decision {
				return l.AllowAllWithin(ctx, 1, 60*time.Millisecond, "open", "closed", "tiny")
			})
		}
		for i := range 20 {
			round(i)
			time.Sleep(50 * time.Millisecond)
		}
		synctest.Wait()
		sl.check(t, "after normal traffic", 0)

		// The hot tenant's quota falls and rises mid-flight.
		if err := l.SetQuota(ctx, "hot", leasequota.Quota{Rate: 5, Burst: 10}); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			round(i)
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			sl.check(t, fmt.Sprintf("quota round %d", i), 0)
		}
		if err := l.DeleteQuota(ctx, "hot"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sl.check(t, "after quota changes", 0)
		store.SetDown(nil)
		for i := range 40 {
			round(i)
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			sl.check(t, fmt.Sprintf("outage round %d", i), 0)
		}
		synctest.Wait()
		sl.check(t, "during an outage", 0)
		store.SetUp()
		for i := range 20 {
			round(i)
			// More tenants than WithMaxTenants: some are evicted with
			// tokens held.
			one("x"+string(rune('a'+i%8)), 1)
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			sl.check(t, fmt.Sprintf("evicting round %d", i), 0)
		}
		time.Sleep(10 * time.Second) // idle: evictions
		synctest.Wait()
		sl.check(t, "after evictions", 0)
		checkMetrics(t, l, reader)
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sl.check(t, "after Close", 0)
		st := l.Stats()
		t.Logf("stats: %+v", st)
	})
}

// TestAccountingIdentitiesConcurrent: requests of several goroutines at
// once (single- and multi-tenant, waits, refunds) race the syncer's
// rounds, evictions and, at the end, Close; the tokens and decisions
// still add up.
func TestAccountingIdentitiesConcurrent(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []leasequota.Option
	}{
		{"plain", nil},
		{"reservation", []leasequota.Option{leasequota.WithReservation(2 * time.Second)}},
		{"shares", []leasequota.Option{leasequota.WithRateShares(2*time.Second, 0.2)}},
		{"percpu", []leasequota.Option{leasequota.WithPerCPUTokens(1)}},
		// Another instance on the same tenants: shares split among two.
		{"shares-two", []leasequota.Option{leasequota.WithRateShares(2*time.Second, 0.2)}},
		{"reservation-two", []leasequota.Option{leasequota.WithReservation(2 * time.Second)}},
	} {
		t.Run(c.name, func(t *testing.T) { accountingConcurrent(t, c.opts, strings.HasSuffix(c.name, "-two")) })
	}
}

// accountingConcurrent runs the test with opts; peer runs a second
// limiter on the same store, with the same options, whose requests and
// refunds take from the same buckets.
func accountingConcurrent(t *testing.T, opts []leasequota.Option, peer bool) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := faultstore.New(memstore.New())
		t.Cleanup(store.SetUp)
		// FailClosed: a failure mode admits nothing, so every admission
		// spent its tenants' leased tokens (book), outage or not.
		l := newLimiter(t, store, append([]leasequota.Option{
			leasequota.WithFailureMode(leasequota.FailClosed),
			leasequota.WithMaxTenants(3),
			leasequota.WithIdleTimeout(2 * time.Second),
			leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
				if tenant == "tiny" {
					return leasequota.Quota{Rate: 2, Burst: 4}
				}
				return leasequota.Quota{Rate: 50, Burst: 60, MinLease: 5}
			})}, opts...)...)
		if peer {
			p := newLimiter(t, store, append([]leasequota.Option{
				leasequota.WithQuotaFunc(func(string) leasequota.Quota { return leasequota.Quota{Rate: 50, Burst: 60, MinLease: 5} })},
				opts...)...)
			done := make(chan struct{})
			defer close(done)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					case <-time.After(3 * time.Millisecond):
					}
					d := p.AllowN(ctx, []string{"a", "b", "c"}[i%3], 1)
					if d.Allowed && i%5 == 0 {
						_ = p.Refund(&d) // its counts are not checked
					}
				}
			}()
		}
		var mu sync.Mutex
		var spent, calls int64
		book := func(d leasequota.Decision, n int64, k int) {
			mu.Lock()
			defer mu.Unlock()
			if !d.Allowed {
				calls++
				return
			}
			spent += n * int64(k)
			calls += int64(k)
		}
		var wg sync.WaitGroup
		tenants := []string{"a", "b", "c", "d", "tiny"}
		for g := range 6 {
			wg.Go(func() {
				for i := 0; ; i++ {
					if i%50 == 49 {
						time.Sleep(37 * time.Millisecond)
					}
					x, y := tenants[(g+i)%5], tenants[(g+2*i+1)%5]
					var d leasequota.Decision
					var n int64 = 1 + int64(i%2)
					k := 1
					switch i % 5 {
					case 0, 1:
						d = l.AllowN(ctx, x, n)
					case 2:
						wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
						d, _ = l.WaitN(wctx, x, n)
						cancel()
					case 3:
						if x == y {
							continue
						}
						d, k = l.AllowAllWithin(ctx, n, 30*time.Millisecond, x, y), 2
					case 4:
						if x == y {
							continue
						}
						if i%10 == 9 {
							wctx, cancel := context.WithTimeout(ctx, 40*time.Millisecond)
							d, _ = l.WaitAll(wctx, n, x, y)
							cancel()
						} else {
							d = l.AllowAll(ctx, n, x, y)
						}
						k = 2
					}
					if d.Reason == leasequota.ReasonClosed {
						book(d, n, k)
						return
					}
					if d.Reason == leasequota.ReasonTooManyTenants || d.Reason == leasequota.ReasonInvalidN {
						book(d, n, k)
						continue
					}
					book(d, n, k)
					if d.Allowed && i%7 == 0 {
						names := []string{x}
						if k == 2 {
							names = append(names, y)
						}
						if err := l.Refund(&d, names...); err != nil && !errors.Is(err, leasequota.ErrNotRefundable) && !errors.Is(err, leasequota.ErrClosed) {
							t.Error(err)
						}
					}
				}
			})
		}
		time.Sleep(2 * time.Second)
		store.SetDown(nil) // an outage, and Redis back
		time.Sleep(1500 * time.Millisecond)
		store.SetUp()
		time.Sleep(1500 * time.Millisecond)
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		synctest.Wait()
		st := l.Stats()
		in, returned, forfeited, held := leasequota.LeaseTokens(l)
		if got, want := in+st.Refunded, spent+returned+forfeited+held; got != want {
			t.Errorf("came in %d + refunded %d = %d, want spent %d + returned %d + forfeited %d + held %d = %d (off by %d)",
				in, st.Refunded, got, spent, returned, forfeited, held, want, got-want)
		}
		if got := decisionsOf(st); got != calls {
			t.Errorf("decisions %d, want %d (off by %d)", got, calls, got-calls)
		}
		t.Logf("stats: %+v", st)
	})
}
