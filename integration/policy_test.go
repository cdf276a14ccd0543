package integration

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// The policy tests (#17): AllowAll over several keys, on three limiters
// with their own clients sharing one redis-server, FailClosed so that
// every admission comes from a lease and each key's bound is exact:
// admitted - refunded <= Burst + Rate*T, T on the Redis clock from
// before the first request to after the last (at least the time since
// the key's bucket was made).

// keyCounts counts a key's admissions, net of refunds, and the denials
// it decided.
type keyCounts struct {
	net    atomic.Int64
	denied atomic.Int64
}

// policyKeys is the keys of a test, with their quotas.
type policyKeys struct {
	quota  map[string]leasequota.Quota
	counts map[string]*keyCounts
}

func newPolicyKeys(quota map[string]leasequota.Quota) *policyKeys {
	k := &policyKeys{quota: quota, counts: map[string]*keyCounts{}}
	for name := range quota {
		k.counts[name] = &keyCounts{}
	}
	return k
}

// quotaFunc resolves the test's keys (only those: another is a bug of the
// test, and gets an invalid quota).
func (k *policyKeys) quotaFunc(key string) leasequota.Quota { return k.quota[key] }

// allowAll decides n over keys on l and counts the decision.
func (k *policyKeys) allowAll(l *leasequota.Limiter, n int64, keys ...string) leasequota.Decision {
	d := l.AllowAll(context.Background(), n, keys...)
	if d.Allowed {
		for _, key := range keys {
			k.counts[key].net.Add(n)
		}
	} else if c := k.counts[d.Tenant]; c != nil {
		c.denied.Add(1)
	}
	return d
}

// allowN decides n of key on l and counts the decision.
func (k *policyKeys) allowN(l *leasequota.Limiter, n int64, key string) leasequota.Decision {
	d := l.AllowN(context.Background(), key, n)
	if d.Allowed {
		k.counts[key].net.Add(n)
	} else {
		k.counts[key].denied.Add(1)
	}
	return d
}

// refund refunds d (admitted for n over keys) on l and uncounts it.
func (k *policyKeys) refund(t *testing.T, l *leasequota.Limiter, d *leasequota.Decision, n int64, keys ...string) {
	if err := l.Refund(d, keys...); err != nil {
		t.Errorf("Refund of %+v: %v", *d, err)
		return
	}
	for _, key := range keys {
		k.counts[key].net.Add(-n)
	}
}

// bound returns key's Burst + Rate*elapsed.
func (k *policyKeys) bound(key string, elapsed time.Duration) float64 {
	q := k.quota[key]
	return float64(q.Burst) + q.Rate*elapsed.Seconds()
}

// checkBounds checks every key's net admissions against its bound,
// exactly, and logs them.
func (k *policyKeys) checkBounds(t *testing.T, elapsed time.Duration) {
	t.Helper()
	names := make([]string, 0, len(k.quota))
	for name := range k.quota {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c, bound := k.counts[name], k.bound(name, elapsed)
		net := c.net.Load()
		t.Logf("%s: admitted net %d of bound %.1f (%.1f%%), decided %d denials", name, net, bound, 100*float64(net)/bound, c.denied.Load())
		if float64(net) > bound {
			t.Errorf("%s: admitted net of refunds %d > bound %.1f (burst %d + rate %g * %v)", name, net, bound, k.quota[name].Burst, k.quota[name].Rate, elapsed)
		}
	}
}

// policyLimiters returns three limiters, each with its own client, on the
// keys' quotas, FailClosed.
func policyLimiters(t *testing.T, keys *policyKeys, opts ...leasequota.Option) []*leasequota.Limiter {
	return newLimiters(t, 3, append([]leasequota.Option{leasequota.WithFailureMode(leasequota.FailClosed),
		leasequota.WithQuotaFunc(keys.quotaFunc)}, opts...)...)
}

// runLoad runs each of the loads, paced at its rate (requests per
// second), in goroutines of its own, for d; it returns the time the load
// ran on the Redis clock, from before the first request to after the
// last.
func runLoad(t *testing.T, d time.Duration, loads ...load) time.Duration {
	t.Helper()
	admin := redistest.Client(t)
	start := redisTime(t, admin)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, ld := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paced(&stop, func(float64) float64 { return ld.rate }, ld.f)
		}()
	}
	time.Sleep(d) // the load runs (pacing, not waiting for a condition)
	stop.Store(true)
	wg.Wait()
	return redisTime(t, admin).Sub(start)
}

// load is requests f at rate per second.
type load struct {
	rate float64
	f    func()
}

// TestPolicyTwoWindows: one tenant under two windows, 100 a second and
// 240 a minute, decided by AllowAll on three instances at 120 requests a
// second for 4 s. Over the run the minute is the tighter window (its bound
// 240 + 4*4 = 256 against the second's 100 + 100*4 = 500), so it alone
// binds: it is used to utilizationFloor of its bound (90 % on a quiet
// machine), it decides the denials, and neither window is exceeded.
func TestPolicyTwoWindows(t *testing.T) {
	leakCheck(t)
	keys := newPolicyKeys(map[string]leasequota.Quota{
		"t:sec": leasequota.Per(100, time.Second),
		"t:min": leasequota.Per(240, time.Minute),
	})
	ls := policyLimiters(t, keys)
	var calls atomic.Int64
	var loads []load
	for i := range 6 {
		l := ls[i%len(ls)]
		loads = append(loads, load{rate: 120.0 / 6, f: func() {
			calls.Add(1)
			keys.allowAll(l, 1, "t:sec", "t:min")
		}})
	}
	probe := startStallProbe()
	defer probe.Stop()
	elapsed := runLoad(t, 4*time.Second, loads...)
	probe.Stop()
	t.Log(probe)
	t.Logf("%d calls over %v (Redis clock)", calls.Load(), elapsed)
	keys.checkBounds(t, elapsed)

	minute, second := keys.counts["t:min"], keys.counts["t:sec"]
	floor := utilizationFloor(probe, 0.8)
	if got, bound := float64(minute.net.Load()), keys.bound("t:min", elapsed); got < floor*bound {
		t.Errorf("t:min admitted %.0f < %.0f%% of its bound %.1f (utilizationFloor: on what the machine delivered to this process)", got, 100*floor, bound)
	}
	// The tighter window decides: the other denies only when a lease of
	// it ran out here before its next one came (its bucket never
	// empties: at most 240 of its 100 + 100*2.4 s are asked for before
	// the minute's burst is spent).
	denied := minute.denied.Load() + second.denied.Load()
	if denied == 0 || second.denied.Load()*10 > denied {
		t.Errorf("denials: %d by t:min, %d by t:sec; want most by t:min, the tighter window", minute.denied.Load(), second.denied.Load())
	}
}

// TestPolicyGlobalOverTenants: a global key (300/s, burst 150) over five
// tenant keys (100/s, burst 50 each), every request AllowAll(tenant,
// global) from three instances, each tenant asked 120/s for 4 s, and one
// admission in ten refunded. The tenants together ask twice what the
// global key allows: the sum of their admissions, net of refunds, stays
// within the global key's bound exactly and reaches utilizationFloor of
// it; each tenant key stays within its own bound.
func TestPolicyGlobalOverTenants(t *testing.T) {
	leakCheck(t)
	quotas := map[string]leasequota.Quota{"global": {Rate: 300, Burst: 150}}
	tenants := make([]string, 5)
	for i := range tenants {
		tenants[i] = "tenant:" + strconv.Itoa(i)
		quotas[tenants[i]] = leasequota.Quota{Rate: 100, Burst: 50}
	}
	keys := newPolicyKeys(quotas)
	ls := policyLimiters(t, keys)
	var refunds atomic.Int64
	var loads []load
	for i := range 2 * len(ls) {
		l := ls[i%len(ls)]
		for j, tenant := range tenants {
			r := rand.New(rand.NewPCG(uint64(i), uint64(j)))
			loads = append(loads, load{rate: 120.0 / float64(2*len(ls)), f: func() {
				d := keys.allowAll(l, 1, tenant, "global")
				if d.Allowed && r.IntN(10) == 0 {
					keys.refund(t, l, &d, 1, tenant, "global")
					refunds.Add(1)
				}
			}})
		}
	}
	probe := startStallProbe()
	defer probe.Stop()
	elapsed := runLoad(t, 4*time.Second, loads...)
	probe.Stop()
	t.Log(probe)
	t.Logf("%d refunds over %v (Redis clock)", refunds.Load(), elapsed)
	keys.checkBounds(t, elapsed)

	var sum int64
	for _, tenant := range tenants {
		sum += keys.counts[tenant].net.Load()
	}
	if g := keys.counts["global"].net.Load(); sum != g {
		t.Errorf("the tenants' admissions sum to %d, the global key's are %d", sum, g)
	}
	floor := utilizationFloor(probe, 0.8)
	if bound := keys.bound("global", elapsed); float64(sum) < floor*bound {
		t.Errorf("global: admitted net %d < %.0f%% of its bound %.1f (utilizationFloor: on what the machine delivered to this process)", sum, 100*floor, bound)
	}
	if refunds.Load() == 0 {
		t.Error("no refund was made")
	}
}

// TestPolicyAllOrNothing: one client IP asks 600 requests a second of a
// tenant's quota (100/s, burst 50) under a per-IP quota of 5 a second,
// the tenant's key named first, so that each of its calls takes a token
// of the tenant before its IP's key denies; other clients of the tenant
// ask 80 a second under loose IP quotas. A denial spends nothing: the
// tenant's tokens stay with its other clients, who are admitted
// utilizationFloor of what they ask (90 % on a quiet machine), while the
// busy IP is denied nearly every call and held to its own bound.
func TestPolicyAllOrNothing(t *testing.T) {
	leakCheck(t)
	keys := newPolicyKeys(map[string]leasequota.Quota{
		"tenant:acme": {Rate: 100, Burst: 50},
		"ip:bad":      leasequota.Per(5, time.Second),
		"ip:good0":    leasequota.Per(1000, time.Second),
		"ip:good1":    leasequota.Per(1000, time.Second),
		"ip:good2":    leasequota.Per(1000, time.Second),
	})
	ls := policyLimiters(t, keys)
	var badCalls, goodCalls, goodAdmitted atomic.Int64
	var loads []load
	for i := range 2 * len(ls) {
		l := ls[i%len(ls)]
		loads = append(loads, load{rate: 600.0 / float64(2*len(ls)), f: func() {
			badCalls.Add(1)
			keys.allowAll(l, 1, "tenant:acme", "ip:bad")
		}})
		ip := fmt.Sprintf("ip:good%d", i%3)
		loads = append(loads, load{rate: 80.0 / float64(2*len(ls)), f: func() {
			goodCalls.Add(1)
			if keys.allowAll(l, 1, "tenant:acme", ip).Allowed {
				goodAdmitted.Add(1)
			}
		}})
	}
	probe := startStallProbe()
	defer probe.Stop()
	elapsed := runLoad(t, 3*time.Second, loads...)
	probe.Stop()
	t.Log(probe)
	keys.checkBounds(t, elapsed)

	bad := keys.counts["ip:bad"].net.Load()
	t.Logf("busy IP: %d of %d calls admitted; other clients: %d of %d", bad, badCalls.Load(), goodAdmitted.Load(), goodCalls.Load())
	if bad*10 > badCalls.Load() {
		t.Errorf("the busy IP was admitted %d of %d calls: its key does not deny most of them, the test tests nothing", bad, badCalls.Load())
	}
	floor := utilizationFloor(probe, 0.8)
	if got, want := float64(goodAdmitted.Load()), floor*float64(goodCalls.Load()); got < want {
		t.Errorf("other clients admitted %.0f of %d calls, want >= %.0f (%.0f%%, utilizationFloor): the busy IP's denials spent the tenant's tokens",
			got, goodCalls.Load(), want, 100*floor)
	}
}

// rapidFlags sets rapid's flags for one test, unless given on the command
// line: a fixed seed (a failure is reproduced by the same run) and a
// number of checks that fits the test in CI.
func rapidFlags(t *testing.T, checks int, seed uint64) {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, v := range map[string]string{"rapid.checks": strconv.Itoa(checks), "rapid.seed": strconv.FormatUint(seed, 10)} {
		if given[name] {
			continue
		}
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
}

// policyOp is one step of an instance's part of TestPolicyBoundProperty.
type policyOp struct {
	kind   int // opAllowN, opAllowAll, opDrain, opRefund, opPause
	n      int64
	keys   []string
	target int // opRefund: which earlier admission of the instance
	pause  time.Duration
}

const (
	opAllowN = iota
	opAllowAll
	opDrain // AllowAll as fast as it admits, for a while
	opRefund
	opPause
)

// TestPolicyBoundProperty: random mixes of AllowN, AllowAll (one to five
// keys, in any order; single calls, and drains that call as fast as they
// admit for a while) and Refund (of an earlier admission of the same
// limiter) over five keys of random quotas and lease sizes, run by the
// three limiters at once with pauses that let leases expire and refill;
// for every key admitted - refunded <= Burst + Rate*T, exactly. Each
// check uses keys of its own. Short leases (20 ms rounds, 60 ms
// lifetime) send refunds through every path: back into the lease, to
// Redis naming their grant, forfeited (the fifth key of a call). A
// refund or a give-back credited twice into the lease fails it.
func TestPolicyBoundProperty(t *testing.T) {
	leakCheck(t)
	rapidFlags(t, 25, 17)
	var (
		mu     sync.Mutex
		quotas = map[string]leasequota.Quota{}
	)
	ls := newLimiters(t, 3, leasequota.WithFailureMode(leasequota.FailClosed),
		leasequota.WithRefreshInterval(20*time.Millisecond), leasequota.WithLeaseTTL(60*time.Millisecond),
		// Lease calls of their own deadline, not the 10 ms that a 20 ms
		// refresh interval implies, which a loaded machine misses.
		leasequota.WithRedisTimeout(200*time.Millisecond),
		leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
			mu.Lock()
			defer mu.Unlock()
			return quotas[key]
		}))
	admin := redistest.Client(t)
	var check int
	var total [4]atomic.Int64      // AllowN and AllowAll admissions, -, refunds
	var keysRun, near atomic.Int64 // keys checked, and those admitted >= 80 % of their bound
	rapid.Check(t, func(rt *rapid.T) {
		check++
		names := make([]string, 5)
		keys := map[string]leasequota.Quota{}
		for i := range names {
			names[i] = fmt.Sprintf("c%d:k%d", check, i)
			q := leasequota.Quota{
				Rate:  float64(rapid.IntRange(1, 50).Draw(rt, "rate")),
				Burst: int64(rapid.IntRange(4, 40).Draw(rt, "burst")),
			}
			// Leases from one token to the whole burst: large ones bring
			// the keys to their bounds within a check's few hundred
			// milliseconds, and refunds back into them.
			q.MinLease = int64(rapid.IntRange(1, int(q.Burst)).Draw(rt, "min lease"))
			keys[names[i]] = q
		}
		mu.Lock()
		for k, q := range keys {
			quotas[k] = q
		}
		mu.Unlock()
		pk := newPolicyKeys(keys)
		keysRun.Add(int64(len(names)))

		plans := make([][]policyOp, len(ls))
		for i := range plans {
			for range rapid.IntRange(1, 60).Draw(rt, "ops") {
				// 25 % AllowN, 30 % AllowAll, 15 % drains, 15 % Refund,
				// 15 % pause.
				var kind int
				switch x := rapid.IntRange(0, 19).Draw(rt, "op"); {
				case x < 5:
					kind = opAllowN
				case x < 11:
					kind = opAllowAll
				case x < 14:
					kind = opDrain
				case x < 17:
					kind = opRefund
				default:
					kind = opPause
				}
				op := policyOp{kind: kind, n: int64(rapid.IntRange(1, 3).Draw(rt, "n"))}
				switch op.kind {
				case opAllowN:
					op.keys = []string{rapid.SampledFrom(names).Draw(rt, "key")}
				case opAllowAll, opDrain:
					perm := rapid.Permutation(names).Draw(rt, "keys")
					op.keys = perm[:rapid.IntRange(1, len(perm)).Draw(rt, "how many")]
					if kind == opDrain {
						op.pause = time.Duration(rapid.IntRange(5, 40).Draw(rt, "drain ms")) * time.Millisecond
					}
				case opRefund:
					op.target = rapid.IntRange(0, 1<<20).Draw(rt, "refund")
				case opPause:
					op.pause = time.Duration(rapid.IntRange(0, 30).Draw(rt, "pause ms")) * time.Millisecond
				}
				plans[i] = append(plans[i], op)
			}
		}

		start := redisTime(t, admin)
		var wg sync.WaitGroup
		for i, plan := range plans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := ls[i]
				type admitted struct {
					d    leasequota.Decision
					n    int64
					keys []string
				}
				var done []admitted
				for _, op := range plan {
					switch op.kind {
					case opAllowN, opAllowAll:
						var d leasequota.Decision
						if op.kind == opAllowN {
							d = pk.allowN(l, op.n, op.keys[0])
						} else {
							d = pk.allowAll(l, op.n, op.keys...)
						}
						if d.Allowed {
							done = append(done, admitted{d, op.n, op.keys})
							total[op.kind].Add(1)
						}
						if !slices.Contains(op.keys, d.Tenant) {
							t.Errorf("AllowAll(%d, %v) = %+v: its Tenant is none of the keys", op.n, op.keys, d)
						}
					case opDrain:
						// Demand beyond the keys' leases: the syncer
						// refills them urgently until a bucket is dry.
						for end := time.Now().Add(op.pause); time.Now().Before(end); {
							d := pk.allowAll(l, op.n, op.keys...)
							if !d.Allowed {
								time.Sleep(time.Millisecond) // the workload's pace
								continue
							}
							done = append(done, admitted{d, op.n, op.keys})
							total[opAllowAll].Add(1)
						}
					case opRefund:
						if len(done) == 0 {
							continue
						}
						a := &done[op.target%len(done)]
						if a.d.Allowed {
							pk.refund(t, l, &a.d, a.n, a.keys...)
							a.d.Allowed = false // refunded: not again
							total[opRefund].Add(1)
						}
					case opPause:
						time.Sleep(op.pause) // the workload's pace: time passes, leases expire
					}
				}
			}()
		}
		wg.Wait()
		elapsed := redisTime(t, admin).Sub(start)
		for _, name := range names {
			net, bound := pk.counts[name].net.Load(), pk.bound(name, elapsed)
			if float64(net) > bound {
				rt.Fatalf("%s (%+v): admitted net of refunds %d > bound %.2f over %v", name, keys[name], net, bound, elapsed)
			}
			if float64(net) >= 0.8*bound {
				near.Add(1)
			}
		}
	})
	t.Logf("%d runs of the property: %d AllowN and %d AllowAll admissions, %d refunds; %d of %d keys admitted >= 80 %% of their bound",
		check, total[opAllowN].Load(), total[opAllowAll].Load(), total[opRefund].Load(), near.Load(), keysRun.Load())
	if total[opAllowAll].Load() == 0 || total[opRefund].Load() == 0 {
		t.Errorf("the mixes made %d AllowAll admissions and %d refunds: want some of each", total[opAllowAll].Load(), total[opRefund].Load())
	}
}
