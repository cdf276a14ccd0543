package syncer

import (
	"context"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// BenchmarkRoundAcquire is one round (Tick) over 10,000 tenants that
// each make a lease call: every tenant spent its lease and missed since
// the last round, the clock moved past every hold, and the call budget
// has room for all. The store answers at once from the requests, granting
// each in full, and allocates nothing when given results to reuse, so
// allocs/op is the syncer's own: planning, the requests it builds, and
// applying the results (lease.BenchmarkAcquireRound counts the Redis
// client's).
func BenchmarkRoundAcquire(b *testing.B) {
	const tenants = 10_000
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := &grantAll{now: clock}
	s := New(st, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: clock})
	round := spendingRounds(b, s, &now, tenants, 2*tenants)
	for range 4 {
		round()
	}
	calls := st.acquired
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	if n := float64(st.acquired-calls) / float64(b.N); n < tenants*0.9 {
		b.Fatalf("%.0f acquires a round, want about %d", n, tenants)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tenants, "ns/tenant")
}

// spendingRounds tracks n tenants on s (a quota that leases up to 10
// tokens a call) and returns a round of them: every tenant spends what it
// holds and misses, the clock *now moves 2 s on, past every hold, the
// call budget's window is set to window, and s ticks. Each round then
// plans a call for every tenant.
func spendingRounds(b *testing.B, s *Syncer, now *time.Time, n, window int) func() {
	b.Helper()
	q := quota.Quota{Rate: 1e6, Burst: 1e6, MinLease: 1, MaxLease: 10, LeaseTTL: time.Second}
	all := make([]*Tenant, n)
	for i := range all {
		var err error
		if all[i], err = s.Track(fmt.Sprintf("tenant-%05d", i), q); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	return func() {
		for _, t := range all {
			if h := t.Held(); h > 0 {
				t.Spend(h)
			}
			t.NoteMiss(2)
		}
		*now = now.Add(2 * time.Second)
		setWindow(s, window)
		s.Tick(ctx)
	}
}

// grantAll is a lease.Store that grants every acquire in full, at once,
// from a bucket that stays full; it allocates nothing but results when
// not given a slice to reuse. Only AcquireMany and ReleaseMany are used.
type grantAll struct {
	lease.Store
	now      func() time.Time
	acquired int // guarded by the syncer: one round at a time, Driven or not
}

func (g *grantAll) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if cap(results) >= len(reqs) {
		results = results[:len(reqs)]
	} else {
		results = make([]lease.Result, len(reqs))
	}
	at := g.now()
	for i, r := range reqs {
		results[i] = lease.Result{Grant: lease.Grant{Granted: r.Want, Tokens: float64(r.Limits.Burst - r.Want), ServerTime: at, Instances: 1}}
	}
	g.acquired += len(reqs)
	return results, nil
}

func (g *grantAll) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	return make([]lease.ReleaseResult, len(reqs))
}

func (g *grantAll) QuotaVersion(ctx context.Context) (int64, error) { return 0, nil }

func (g *grantAll) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	return func(func(lease.ListedOverride, error) bool) {}
}
