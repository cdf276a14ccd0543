package leasequota_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

func TestPer(t *testing.T) {
	q := leasequota.Per(10, 2*time.Second)
	if q.Rate != 5 || q.Burst != 10 {
		t.Errorf("Per(10, 2s) = %+v, want Rate 5, Burst 10", q)
	}
	if err := q.Validate(); err != nil {
		t.Errorf("Per(10, 2s).Validate: %v", err)
	}
	for _, c := range []struct {
		n      int64
		period time.Duration
		field  string
	}{{0, time.Second, "Rate"}, {-1, time.Second, "Rate"}, {10, 0, "Rate"}, {10, -time.Second, "Rate"}} {
		err := leasequota.Per(c.n, c.period).Validate()
		if !errors.Is(err, leasequota.ErrInvalidQuota) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Per(%d, %v).Validate() = %v, want ErrInvalidQuota naming %s", c.n, c.period, err, c.field)
		}
	}
}

// policyQuota gives "ip:" keys a tight quota and every other key a roomy one.
func policyQuota(tenant string) leasequota.Quota {
	if strings.HasPrefix(tenant, "ip:") {
		return leasequota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2}
	}
	return leasequota.Quota{Rate: 0.001, Burst: 100, MinLease: 50, MaxLease: 100}
}

func TestAllowAllAllOrNothing(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithQuotaFunc(policyQuota))
	ctx := context.Background()
	for i := range 2 {
		d := l.AllowAll(ctx, 1, "ip:a", "tenant:x")
		if !d.Allowed {
			t.Fatalf("call %d denied: %+v", i, d)
		}
		if d.Tenant != "ip:a" {
			t.Errorf("call %d: Tenant %q, want ip:a (the least Remaining)", i, d.Tenant)
		}
	}
	before, _ := l.Tenant("tenant:x")
	for range 5 {
		d := l.AllowAll(ctx, 1, "tenant:x", "ip:a")
		if d.Allowed || d.Tenant != "ip:a" || d.Reason != leasequota.ReasonExhausted {
			t.Fatalf("AllowAll after ip:a's burst = %+v, want a denial by ip:a", d)
		}
	}
	after, _ := l.Tenant("tenant:x")
	if after.Tokens != before.Tokens {
		t.Errorf("tenant:x held %d tokens before the denials, %d after: a denial spent", before.Tokens, after.Tokens)
	}
	// AllowN fills Tenant too.
	if d := l.AllowN(ctx, "tenant:x", 1); !d.Allowed || d.Tenant != "tenant:x" {
		t.Errorf("AllowN = %+v, want admitted with Tenant tenant:x", d)
	}
}

func TestAllowAllBadInput(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithQuotaFunc(policyQuota))
	ctx := context.Background()
	cases := []struct {
		name    string
		n       int64
		tenants []string
		reason  leasequota.Reason
		tenant  string
		err     error
	}{
		{"no tenants", 1, nil, leasequota.ReasonNoTenants, "", leasequota.ErrNoTenants},
		{"duplicate", 1, []string{"a", "b", "a"}, leasequota.ReasonDuplicateTenant, "a", leasequota.ErrDuplicateTenant},
		{"n zero", 0, []string{"a", "b"}, leasequota.ReasonInvalidN, "a", leasequota.ErrInvalidN},
		{"n above a burst", 3, []string{"a", "ip:b"}, leasequota.ReasonInvalidN, "ip:b", leasequota.ErrExceedsBurst},
	}
	for _, c := range cases {
		d := l.AllowAll(ctx, c.n, c.tenants...)
		if d.Allowed || d.Reason != c.reason || d.Tenant != c.tenant {
			t.Errorf("%s: AllowAll = %+v, want denied, %v, Tenant %q", c.name, d, c.reason, c.tenant)
		}
		if _, err := l.WaitAll(ctx, c.n, c.tenants...); !errors.Is(err, c.err) {
			t.Errorf("%s: WaitAll error %v, want %v", c.name, err, c.err)
		}
	}
	// Nothing was spent from the tenants named.
	for _, tenant := range []string{"a", "b", "ip:b"} {
		if info, ok := l.Tenant(tenant); ok && info.Tokens > 0 {
			// Tracked tenants may hold a lease; none was spent from: a
			// full AllowAll still admits.
			_ = info
		}
	}
	if d := l.AllowAll(ctx, 2, "a", "ip:b"); !d.Allowed {
		t.Errorf("after the bad calls, AllowAll(2, a, ip:b) = %+v, want admitted (nothing spent)", d)
	}
}

func TestRefund(t *testing.T) {
	store := setup(t)
	// No scheduled round during the test: what the refunds do is theirs.
	l := newLimiter(t, store, leasequota.WithQuotaFunc(policyQuota),
		leasequota.WithRefreshInterval(5*time.Minute), leasequota.WithLeaseTTL(10*time.Minute))
	ctx := context.Background()

	// A live lease takes its tokens back.
	if d := l.AllowN(ctx, "tenant:x", 1); !d.Allowed {
		t.Fatalf("AllowN = %+v", d)
	}
	x, _ := l.Tenant("tenant:x")
	d := l.AllowN(ctx, "tenant:x", 3)
	if !d.Allowed {
		t.Fatalf("AllowN = %+v", d)
	}
	if err := l.Refund(&d, "ip:other"); !errors.Is(err, leasequota.ErrNotRefundable) {
		t.Errorf("Refund naming another tenant: %v, want ErrNotRefundable", err)
	}
	if err := l.Refund(&d); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if err := l.Refund(&d); !errors.Is(err, leasequota.ErrNotRefundable) {
		t.Errorf("second Refund: %v, want ErrNotRefundable", err)
	}
	if info, _ := l.Tenant("tenant:x"); info.Tokens != x.Tokens {
		t.Errorf("tenant:x holds %d tokens after the refund, want %d (credited to its lease)", info.Tokens, x.Tokens)
	}

	// An AllowAll decision refunds every tenant, named in the call's order.
	da := l.AllowAll(ctx, 2, "ip:a", "tenant:x")
	if !da.Allowed {
		t.Fatalf("AllowAll = %+v", da)
	}
	if err := l.Refund(&da, "ip:a"); !errors.Is(err, leasequota.ErrNotRefundable) {
		t.Errorf("Refund naming one of two tenants: %v, want ErrNotRefundable", err)
	}
	if err := l.Refund(&da, "tenant:x", "ip:a"); !errors.Is(err, leasequota.ErrNotRefundable) {
		t.Errorf("Refund naming the tenants out of order: %v, want ErrNotRefundable", err)
	}
	if err := l.Refund(&da, "ip:a", "tenant:x"); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if info, _ := l.Tenant("tenant:x"); info.Tokens != x.Tokens {
		t.Errorf("tenant:x holds %d tokens after the refund, want %d", info.Tokens, x.Tokens)
	}

	// ip:a's 2 tokens went back into its lease, or, when a lease call
	// for ip:a (a prefetch of the lease the AllowAll emptied) held its
	// lock, to Redis, and come back with ip:a's next lease call, which
	// makes the return first: either way they are admitted again, and
	// nothing else could admit them.
	var d2 leasequota.Decision
	deadline := time.Now().Add(5 * time.Second)
	for d2 = l.AllowN(ctx, "ip:a", 2); !d2.Allowed; d2 = l.AllowN(ctx, "ip:a", 2) {
		if time.Now().After(deadline) {
			t.Fatalf("AllowN(ip:a, 2) after the refund = %+v; stats %+v", d2, l.Stats())
		}
		time.Sleep(time.Millisecond) // polling; the deadline bounds it
	}

	// ip:a's burst (2) is spent and its lease with it: the last lease
	// call for ip:a, or the one the denial below makes, found its bucket
	// dry (it refills a token in 1000 s), which holds ip:a's calls back.
	// The refund of d2 goes back into the lease, or to Redis and comes
	// back in a later lease: the return ends that wait. Nothing else can
	// admit ip:a within the test.
	if dd := l.AllowN(ctx, "ip:a", 1); dd.Allowed {
		t.Fatal("ip:a admitted beyond its burst")
	}
	if err := l.Refund(&d2); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !l.AllowN(ctx, "ip:a", 2).Allowed {
		if time.Now().After(deadline) {
			t.Fatalf("the 2 tokens refunded to ip:a never came back; stats %+v", l.Stats())
		}
		time.Sleep(time.Millisecond) // polling; the deadline bounds it
	}
	if dd := l.AllowN(ctx, "ip:a", 1); dd.Allowed {
		t.Error("ip:a admitted more than its burst plus the refund")
	}
	if s := l.Stats(); s.Refunded != 3+2*2+2 {
		t.Errorf("Stats.Refunded = %d, want 9", s.Refunded)
	}
	// A denial has nothing to refund.
	deny := l.AllowN(ctx, "ip:a", 3)
	if err := l.Refund(&deny); !errors.Is(err, leasequota.ErrNotRefundable) {
		t.Errorf("Refund of a denial: %v, want ErrNotRefundable", err)
	}
}

func TestWaitAll(t *testing.T) {
	store := setup(t)
	// ip: 2 tokens, 20 a second: WaitAll must wait for its refill.
	l := newLimiter(t, store, leasequota.WithRefreshInterval(10*time.Millisecond), leasequota.WithLeaseTTL(100*time.Millisecond),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if strings.HasPrefix(tenant, "ip:") {
				return leasequota.Per(2, 100*time.Millisecond)
			}
			return leasequota.Quota{Rate: 1000, Burst: 1000}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 6 {
		d, err := l.WaitAll(ctx, 1, "tenant:x", "ip:a")
		if err != nil || !d.Allowed {
			t.Fatalf("WaitAll %d: %+v, %v", i, d, err)
		}
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	l2 := newLimiter(t, store, leasequota.WithQuotaFunc(policyQuota))
	// Spend ip:z's burst (2; refilled in 1000 s), leases in flight included.
	for spent := 0; spent < 2; {
		if l2.AllowN(context.Background(), "ip:z", 1).Allowed {
			spent++
		}
		if ctx.Err() != nil {
			t.Fatal("ip:z never admitted its burst")
		}
	}
	if d, err := l2.WaitAll(short, 1, "tenant:y", "ip:z"); err == nil || d.Allowed || d.Tenant != "ip:z" {
		t.Errorf("WaitAll on a key that refills in 1000 s: %+v, %v; want a denial by ip:z with ctx's error", d, err)
	}
	if leasequota.MaxTurnsWithoutWait(l) > 3 {
		t.Errorf("a decision took %d turns without waiting", leasequota.MaxTurnsWithoutWait(l))
	}
}

// TestWaitAllWaitsForEviction: a WaitAll whose keys are new while the
// limiter tracks twice WithMaxTenants waits, as WaitN does, for eviction
// to make room, and is admitted; AllowAll is denied too_many_tenants at
// once. (WaitAll returned the registry's error at once before.)
func TestWaitAllWaitsForEviction(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithMaxTenants(2), leasequota.WithRefreshInterval(10*time.Millisecond),
		leasequota.WithLogger(testLogger(t)), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}))
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d"} { // twice the maximum: full
		if d := l.AllowN(ctx, k, 1); !d.Allowed {
			t.Fatalf("AllowN(%s): %+v", k, d)
		}
	}
	if d := l.AllowAll(ctx, 1, "e", "f"); d.Allowed && l.Tenants() >= 4 {
		t.Logf("AllowAll admitted: eviction made room first (%d tracked)", l.Tenants())
	} else if !d.Allowed && d.Reason != leasequota.ReasonTooManyTenants {
		t.Errorf("AllowAll of new keys, registry full: %+v, want too_many_tenants", d)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	d, err := l.WaitAll(wctx, 1, "g", "h")
	if err != nil || !d.Allowed {
		t.Fatalf("WaitAll of new keys, registry full: %+v, %v after %v; want an admission once eviction makes room", d, err, time.Since(start))
	}
	t.Logf("admitted after %v (%d evicted)", time.Since(start), l.Stats().Evicted)
	if n := leasequota.MaxTurnsWithoutWait(l); n > 3 {
		t.Errorf("a decision took %d turns without waiting, want at most 3", n)
	}
}

// TestPolicyBoundProperty mixes AllowN, AllowAll and Refund over three
// limiters sharing one store, at random, and checks every key's bound
// with the admitted tokens counted net of refunds.
func TestPolicyBoundProperty(t *testing.T) {
	store := setup(t)
	keys := []string{"global", "tenant:a", "tenant:b", "ip:1", "ip:2"}
	quotas := map[string]leasequota.Quota{
		"global":   {Rate: 400, Burst: 40},
		"tenant:a": {Rate: 200, Burst: 30},
		"tenant:b": {Rate: 150, Burst: 20},
		"ip:1":     {Rate: 100, Burst: 10},
		"ip:2":     {Rate: 50, Burst: 5},
	}
	var ls []*leasequota.Limiter
	for range 3 {
		l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
			leasequota.WithRefreshInterval(10*time.Millisecond), leasequota.WithLeaseTTL(30*time.Millisecond),
			leasequota.WithFailureMode(leasequota.FailClosed),
			leasequota.WithQuotaFunc(func(k string) leasequota.Quota { return quotas[k] }))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	ctx := context.Background()
	start := time.Now()
	var (
		mu  sync.Mutex
		net = map[string]int64{}
		ops [3]int64 // AllowN, AllowAll, Refund admitted
	)
	var wg sync.WaitGroup
	stop := time.Now().Add(400 * time.Millisecond)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 17))
			l := ls[g%len(ls)]
			local := map[string]int64{}
			var lops [3]int64
			type admitted struct {
				d       leasequota.Decision
				n       int64
				tenants []string
			}
			var pending []admitted
			for time.Now().Before(stop) {
				n := int64(1 + r.IntN(3))
				switch op := r.IntN(10); {
				case op < 4:
					k := keys[r.IntN(len(keys))]
					if d := l.AllowN(ctx, k, n); d.Allowed {
						local[k] += n
						lops[0]++
						if r.IntN(3) == 0 {
							pending = append(pending, admitted{d, n, nil})
						}
					}
				case op < 8:
					ks := []string{"global", keys[1+r.IntN(2)], keys[3+r.IntN(2)]}[:1+r.IntN(3)]
					if d := l.AllowAll(ctx, n, ks...); d.Allowed {
						for _, k := range ks {
							local[k] += n
						}
						lops[1]++
						if r.IntN(3) == 0 {
							pending = append(pending, admitted{d, n, ks})
						}
					}
				default:
					if len(pending) == 0 {
						continue
					}
					p := &pending[r.IntN(len(pending))]
					ts := p.tenants
					if ts == nil {
						ts = []string{p.d.Tenant}
					}
					// A refund twice refunds once: the second is refused.
					if err := l.Refund(&p.d, p.tenants...); err == nil {
						for _, k := range ts {
							local[k] -= p.n
						}
						lops[2]++
					}
				}
			}
			mu.Lock()
			for k, v := range local {
				net[k] += v
			}
			for i := range ops {
				ops[i] += lops[i]
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, l := range ls {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now()
	t.Logf("admissions: %d AllowN, %d AllowAll, %d refunds; net admitted %v", ops[0], ops[1], ops[2], net)
	if ops[1] == 0 || ops[2] == 0 {
		t.Fatalf("the mix ran no AllowAll (%d) or no Refund (%d)", ops[1], ops[2])
	}
	for _, k := range keys {
		q := quotas[k]
		bound := float64(q.Burst) + q.Rate*end.Sub(start).Seconds()
		if float64(net[k]) > bound {
			t.Errorf("%s: admitted net of refunds %d > bound %.1f", k, net[k], bound)
		}
		if net[k] < q.Burst {
			t.Errorf("%s: admitted net %d, less than one burst", k, net[k])
		}
		if g := globalTokens(t, store, k); g+float64(net[k]) > bound+1e-6 {
			t.Errorf("%s: global %.2f + admitted net %d > bound %.1f", k, g, net[k], bound)
		}
	}
}

// TestAllowAllFailureModes: with Redis down and no lease, each key decides
// by its own failure mode, and an admission by its mode stands for the
// call. Two FailOpen keys: AllowAll and WaitAll admit at once (before the
// fix, the two took turns being short: AllowAll denied and WaitAll went
// round without a wait until its ctx ended). A FailOpen and a FailClosed
// key: AllowAll denies by the closed one; WaitAll waits through the
// outage until its ctx ends, without spinning.
func TestAllowAllFailureModes(t *testing.T) {
	store := faultySetup(t)
	store.SetDown(nil)
	quotas := map[string]leasequota.Quota{
		"open1":  {Rate: 100, Burst: 20, FailureMode: leasequota.FailOpen},
		"open2":  {Rate: 100, Burst: 20, FailureMode: leasequota.FailOpen},
		"closed": {Rate: 100, Burst: 20, FailureMode: leasequota.FailClosed},
	}
	l := newLimiter(t, store, leasequota.WithRefreshInterval(20*time.Millisecond), leasequota.WithColdStartWait(0),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quotas[tenant] }))
	ctx := context.Background()
	// The first calls find no lease and Redis failing: until the syncer
	// has tried once, a key may deny as a cold start. Poll with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	var d leasequota.Decision
	for {
		if d = l.AllowAll(ctx, 1, "open1", "open2"); d.Allowed || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // pacing; the deadline bounds it
	}
	if !d.Allowed || d.Mode != leasequota.FailOpen {
		t.Fatalf("AllowAll of two FailOpen keys, Redis down: %+v, want a FailOpen admission", d)
	}
	// Every key was admitted by its mode, none from a lease: nothing to
	// refund, as for AllowN.
	if err := l.Refund(&d, "open1", "open2"); !errors.Is(err, leasequota.ErrNotRefundable) {
		t.Errorf("Refund of an AllowAll admitted by the keys' failure modes only: %v, want ErrNotRefundable", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if d, err := l.WaitAll(wctx, 1, "open1", "open2"); err != nil || !d.Allowed || d.Mode != leasequota.FailOpen {
		t.Fatalf("WaitAll of two FailOpen keys, Redis down: %+v, %v, want a FailOpen admission", d, err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("WaitAll of two FailOpen keys took %v", el)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		d = l.AllowAll(ctx, 1, "open1", "closed")
		if d.Reason == leasequota.ReasonUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // pacing; the deadline bounds it
	}
	if d.Allowed || d.Tenant != "closed" || d.Reason != leasequota.ReasonUnavailable {
		t.Errorf("AllowAll of a FailOpen and a FailClosed key, Redis down: %+v, want a denial by closed", d)
	}
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if d, err := l.WaitAll(short, 1, "open1", "closed"); err == nil || d.Allowed || d.Tenant != "closed" {
		t.Errorf("WaitAll of a FailOpen and a FailClosed key, Redis down: %+v, %v; want a denial by closed with ctx's error", d, err)
	}
	if n := leasequota.MaxTurnsWithoutWait(l); n > 4 {
		t.Errorf("a decision took %d turns without waiting", n)
	}
	// Nothing was leased, so no key holds a token: a give-back must not
	// make one up.
	for _, tenant := range []string{"open1", "open2", "closed"} {
		if info, ok := l.Tenant(tenant); ok && info.Tokens != 0 {
			t.Errorf("%s holds %d tokens, never leased", tenant, info.Tokens)
		}
	}
}
