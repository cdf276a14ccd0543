package leasequota_test

// TestExtremeInputs: a property test (pgregory.net/rapid) of whole
// Limiters over extreme but valid inputs, which the deterministic
// simulation's generators (sim_test.go) do not draw: rates from 1e-10 to
// 1e10 a second (and lease.MaxRate), bursts from 1 to lease.MaxBurst,
// every lease field at its edges, and every option at the edges of its
// valid range (options.go).
//
// Each check draws a plan (quotas, options, a schedule of requests and
// events), then runs it in a testing/synctest bubble: one to four
// Limiters, each running its own syncer (not driven: the loop, the
// refills, the quota refresher and Close's teardown are the production
// ones), on one in-process store (lease/memstore) behind xNet, which
// records what the store granted, issued as rate shares and credited for
// returns, and can be taken down. Every clock the library reads is the
// bubble's, which moves only when every goroutine in it is blocked; each
// step of the plan runs a batch of concurrent calls, each with its ctx
// deadline, then advances the clock. So a step costs real time in
// proportion to the refresh intervals it spans, never to its length: the
// plan's steps and deadlines are drawn in refresh intervals. (The
// simulation's harness drives its limiters by hand, in lanes its network
// asserts, on draws of its own: this test shares its tally of rate
// shares, fromLease and testLogger, and runs the syncers' own loops.)
//
// It checks:
//   - nothing panics; no call returns after its deadline on the fake
//     clock (its ctx, or WithMaxWait and WithColdStartWait for a call
//     without one; Refund and the introspection calls at once), nor takes
//     more than extremeCallLimit of the machine's time (a spin never
//     blocks, so the fake clock would not move: a watchdog on the
//     machine's clock names the step);
//   - every decision holds to the contract: a valid Reason, no admission
//     of n <= 0 or above the Burst it reports (once the tenant's quota
//     changed, above the largest it had: see checkDecision), WaitN and
//     WaitAll admitting exactly when they return no error, a request for
//     n <= 0 or above every Burst the tenant had denied with
//     ReasonInvalidN (WaitN, WaitAll: ErrInvalidN, ErrExceedsBurst), no
//     tenant or a tenant named twice denied as such, RetryAfter 0 on
//     admission, positive on a waitable denial, and ReasonClosed
//     (ErrClosed) once Close returned;
//   - Refund gives back a lease's admission once, and a second Refund of
//     it is ErrNotRefundable;
//   - for every tenant, after each admission and at the end: admitted
//     from leases, net of refunds, is at most what the store granted and
//     the rate shares issued less what returns credited; at most
//     max Burst + max Rate·T since the start (T on the bucket's clock:
//     see checkTenantLocked); and, since each quota
//     change (SetQuota, DeleteQuota), at most B_new + r_new·(T since the
//     change) plus what instances may hold of grants before it
//     (docs/design.md, "Quotas set at run time": 2·MaxLease_old per
//     instance, and the largest n a request asked for; with
//     reservations, what they may hold reserved; what rate shares issued
//     since the change);
//   - Close returns (nil while the store is up), twice the same result,
//     and no goroutine outlives the Limiters (go.uber.org/goleak).
//
// -extreme.checks=N runs N checks (default 200, 40 with -short);
// -rapid.seed=S starts from seed S (rapid prints the seed of a failure).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

var extremeChecks = flag.Int("extreme.checks", 0, "checks TestExtremeInputs runs (0: 200, or 40 with -short)")

const (
	// extremeCallLimit bounds the machine's time one call may take: calls
	// take microseconds of it; a loaded machine under the race detector
	// stretches that, but not a thousandfold.
	extremeCallLimit = 20 * time.Second
	// extremeWatchdog bounds the machine's time of one check: past it, a
	// goroutine spins without blocking (the fake clock stops) and the
	// watchdog panics, naming the plan and the calls in flight.
	extremeWatchdog = 3 * time.Minute
)

func TestExtremeInputs(t *testing.T) {
	checks := *extremeChecks
	if checks <= 0 {
		// 200 take about 1.5 s under the race detector on a 2-core
		// host (a check runs in milliseconds: its fake time costs
		// nothing, its refresh intervals little).
		checks = 200
		if testing.Short() {
			checks = 40
		}
	}
	// rapid takes its number of checks from its own flag (a fifth of it
	// with -short): set it for this test only.
	f := flag.Lookup("rapid.checks")
	old := f.Value.String()
	n := checks
	if testing.Short() {
		n *= 5
	}
	if err := f.Value.Set(fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	defer f.Value.Set(old)
	var cov xCoverage
	rapid.Check(t, func(rt *rapid.T) {
		p := drawXPlan(rt)
		if fails := runXPlan(t, p, &cov); len(fails) > 0 {
			rt.Fatalf("%s\n%s", p, strings.Join(fails, "\n"))
		}
	})
	t.Logf("%d checks: %d admissions from leases counted, %d refunds, %d quota changes, %d with the store down, %d Close calls, %d rate shares granted",
		cov.checks.Load(), cov.admits.Load(), cov.refunds.Load(), cov.changes.Load(), cov.downs.Load(), cov.closes.Load(), cov.shares.Load())
	if cov.checks.Load() >= 50 && (cov.admits.Load() == 0 || cov.refunds.Load() == 0 || cov.changes.Load() == 0) {
		t.Errorf("the checks admitted, refunded or changed quotas never: they do not exercise the bounds")
	}
}

// xCoverage counts what the checks did, for the log and to know that
// they exercise the bounds.
type xCoverage struct {
	checks, admits, refunds, changes, downs, closes, shares atomic.Int64
}

// xPlan is one check: everything it does, drawn before it runs.
type xPlan struct {
	interval  time.Duration
	leaseTTL  time.Duration
	timeout   time.Duration // WithRedisTimeout; 0: not set
	coldWait  time.Duration
	maxWait   time.Duration
	maxTen    int
	idle      time.Duration
	expected  int
	reserve   time.Duration
	period    time.Duration // WithRateShares' period; 0: off
	headroom  float64
	perCPU    float64
	mode      leasequota.FailureMode
	useFunc   bool          // WithQuotaFunc (else WithDefaultQuota: every tenant has tenants[0]'s quota)
	refresh   time.Duration // WithQuotaRefresh (with useFunc); 0: not set
	seed      uint64
	instances int
	tenants   []xTenantPlan
	steps     []xStep
}

type xTenantPlan struct {
	name  string
	quota leasequota.Quota
}

// xStep is one step: an event, then a batch of calls run at once, then
// the clock advanced.
type xStep struct {
	event   xEvent
	ops     []xOp
	advance time.Duration
}

type xEventKind int

const (
	evNone xEventKind = iota
	evSetQuota
	evDeleteQuota
	evDown
	evUp
	evRestart
)

type xEvent struct {
	kind   xEventKind
	inst   int
	tenant int
	quota  leasequota.Quota
}

type xOpKind int

const (
	opAllowN xOpKind = iota
	opAllow
	opWaitN
	opAllowNWithin
	opAllowAll
	opWaitAll
	opAllowAllWithin
	opRefund
	opInvalidate
	opLook // Tenant, TrackedQuota, Stats, Tenants, Degraded
	opClose
	numXOps
)

var xOpNames = [numXOps]string{"AllowN", "Allow", "WaitN", "AllowNWithin", "AllowAll", "WaitAll", "AllowAllWithin", "Refund", "Invalidate", "look", "Close"}

// xN is how an op's n is chosen, against the burst the tenant has when
// the op runs (as far as the test knows: its configured quota or the
// last one SetQuota stored).
type xN int

const (
	nOne xN = iota
	nRandom
	nBurst
	nTwo
	nAboveBurst
	nZero
	nNegative
	nMaxInt
	nMinInt
	numXN
)

// xNs weighs the choices of n: valid ones twice as often as the others.
var xNs = []xN{nOne, nRandom, nBurst, nTwo, nAboveBurst, nZero, nNegative, nMaxInt, nMinInt, nOne, nRandom, nBurst, nTwo, nOne}

type xOp struct {
	kind     xOpKind
	inst     int
	tenants  []int // indices into the plan's tenants (repeats allowed for the *All calls)
	n        xN
	nRand    uint64
	deadline time.Duration // of its ctx, from its start; < 0: ctx canceled already
	within   time.Duration // AllowNWithin's and AllowAllWithin's maxWait
	pick     int           // Refund: which admission kept so far
}

func (p *xPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan: interval %v, lease TTL %v, redis timeout %v, cold wait %v, max wait %v, max tenants %d, idle %v, expected %d, reservation %v, shares %v/%g, per-CPU %g, mode %v, quota func %v, refresh %v, seed %d, %d instances\n",
		p.interval, p.leaseTTL, p.timeout, p.coldWait, p.maxWait, p.maxTen, p.idle, p.expected, p.reserve, p.period, p.headroom, p.perCPU, p.mode, p.useFunc, p.refresh, p.seed, p.instances)
	for i, tn := range p.tenants {
		fmt.Fprintf(&b, "  tenant %d %.20q: %+v\n", i, tn.name, tn.quota)
	}
	for i, s := range p.steps {
		fmt.Fprintf(&b, "  step %d: event %+v; advance %v; ops:", i, s.event, s.advance)
		for _, o := range s.ops {
			fmt.Fprintf(&b, " %s(i%d %v n%d d%v w%v)", xOpNames[o.kind], o.inst, o.tenants, o.n, o.deadline, o.within)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// pick draws one of the edges of a range or, as often, a value between.
// rapid shrinks an index towards 0: the first edge is the simplest case.
func pick[V any](rt *rapid.T, label string, edges []V, between func() V) V {
	i := rapid.IntRange(0, 2*len(edges)-1).Draw(rt, label)
	if i < len(edges) || between == nil {
		return edges[i%len(edges)]
	}
	return between()
}

// logDuration draws a duration from lo to hi, uniform in its logarithm.
func logDuration(rt *rapid.T, label string, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	u := rapid.Float64Range(0, 1).Draw(rt, label)
	d := time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), u))
	return min(max(d, lo), hi)
}

func logInt(rt *rapid.T, label string, lo, hi int64) int64 {
	u := rapid.Float64Range(0, 1).Draw(rt, label)
	v := int64(float64(lo) * math.Pow(float64(hi)/float64(lo), u))
	return min(max(v, lo), hi)
}

const maxDuration = time.Duration(math.MaxInt64)

func drawXPlan(rt *rapid.T) *xPlan {
	p := &xPlan{}
	p.interval = pick(rt, "interval", []time.Duration{time.Millisecond, leasequota.MaxLeaseTTL / 2, 100 * time.Millisecond},
		func() time.Duration {
			return logDuration(rt, "interval log", time.Millisecond, leasequota.MaxLeaseTTL/2)
		})
	minTTL := 2 * p.interval
	p.leaseTTL = pick(rt, "lease TTL", []time.Duration{minTTL, leasequota.MaxLeaseTTL},
		func() time.Duration { return logDuration(rt, "lease TTL log", minTTL, leasequota.MaxLeaseTTL) })
	p.timeout = pick(rt, "redis timeout", []time.Duration{0, 1, leasequota.MaxLeaseTTL},
		func() time.Duration { return logDuration(rt, "redis timeout log", 1, leasequota.MaxLeaseTTL) })
	waits := []time.Duration{0, 1, maxDuration}
	between := func(label string) func() time.Duration {
		return func() time.Duration { return logDuration(rt, label, 1, 10*p.interval) }
	}
	p.coldWait = pick(rt, "cold start wait", waits, between("cold start wait log"))
	p.maxWait = pick(rt, "max wait", waits, between("max wait log"))
	p.maxTen = pick(rt, "max tenants", []int{0, 1, math.MaxInt}, func() int { return rapid.IntRange(1, 3).Draw(rt, "max tenants n") })
	p.idle = pick(rt, "idle timeout", []time.Duration{maxDuration, 1},
		func() time.Duration { return logDuration(rt, "idle timeout log", 1, 20*p.interval) })
	p.expected = pick(rt, "expected instances", []int{0, 1, math.MaxInt}, func() int { return rapid.IntRange(2, 1000).Draw(rt, "expected n") })
	switch rapid.IntRange(0, 2).Draw(rt, "reservations or shares") {
	case 1:
		p.reserve = pick(rt, "reservation", []time.Duration{1, leasequota.MaxReservation},
			func() time.Duration { return logDuration(rt, "reservation log", 1, leasequota.MaxReservation) })
	case 2:
		p.period = pick(rt, "share period", []time.Duration{leasequota.MinSharePeriod, leasequota.MaxSharePeriod},
			func() time.Duration {
				return logDuration(rt, "share period log", leasequota.MinSharePeriod, leasequota.MaxSharePeriod)
			})
		p.headroom = pick(rt, "headroom", []float64{0, math.Nextafter(1, 0)}, func() float64 {
			return rapid.Float64Range(0, 0.999).Draw(rt, "headroom between")
		})
	}
	p.perCPU = pick(rt, "per-CPU demand", []float64{leasequota.DefaultPerCPUDemand, 0, 1, math.MaxFloat64}, nil)
	p.mode = rapid.SampledFrom([]leasequota.FailureMode{leasequota.FailLocal, leasequota.FailClosed, leasequota.FailOpen}).Draw(rt, "mode")
	p.useFunc = rapid.Bool().Draw(rt, "quota func")
	if p.useFunc && rapid.Bool().Draw(rt, "quota refresh") {
		p.refresh = pick(rt, "refresh", []time.Duration{p.interval, maxDuration},
			func() time.Duration { return logDuration(rt, "refresh log", p.interval, 20*p.interval) })
	}
	p.seed = rapid.Uint64().Draw(rt, "seed")
	p.instances = rapid.IntRange(1, 4).Draw(rt, "instances")
	names := []string{"a", "", strings.Repeat("long", 300), "{x}:y", "é\x00z", "b"}
	nt := rapid.IntRange(1, 3).Draw(rt, "tenants")
	for _, k := range rapid.Permutation(names).Draw(rt, "names")[:nt] {
		p.tenants = append(p.tenants, xTenantPlan{name: k, quota: drawXQuota(rt, p.interval)})
	}
	if !p.useFunc {
		for i := range p.tenants {
			p.tenants[i].quota = p.tenants[0].quota
		}
	}
	steps := rapid.IntRange(1, 16).Draw(rt, "steps")
	for range steps {
		p.steps = append(p.steps, drawXStep(rt, p))
	}
	return p
}

func drawXQuota(rt *rapid.T, interval time.Duration) leasequota.Quota {
	var q leasequota.Quota
	q.Rate = pick(rt, "rate", []float64{1e-10, 1e10, lease.MaxRate, 1}, func() float64 {
		return math.Pow(10, rapid.Float64Range(-10, 10).Draw(rt, "rate exponent"))
	})
	q.Burst = pick(rt, "burst", []int64{1, lease.MaxBurst, 2}, func() int64 { return logInt(rt, "burst log", 1, lease.MaxBurst) })
	switch rapid.IntRange(0, 4).Draw(rt, "lease fields") {
	case 1:
		q.MinLease = q.Burst
	case 2:
		q.MaxLease = 1
	case 3:
		q.MinLease, q.MaxLease = 1, q.Burst
	case 4:
		q.MaxLease = rapid.Int64Range(1, q.Burst).Draw(rt, "max lease")
		q.MinLease = rapid.Int64Range(0, q.MaxLease).Draw(rt, "min lease")
	}
	q.LeaseTTL = pick(rt, "quota lease TTL", []time.Duration{0, 2 * interval, leasequota.MaxLeaseTTL}, nil)
	q.FailureMode = rapid.SampledFrom([]leasequota.FailureMode{leasequota.FailDefault, leasequota.FailLocal, leasequota.FailClosed, leasequota.FailOpen}).Draw(rt, "quota mode")
	return q
}

func drawXStep(rt *rapid.T, p *xPlan) xStep {
	var s xStep
	nt := len(p.tenants)
	switch k := rapid.IntRange(0, 9).Draw(rt, "event"); k {
	case 1, 2:
		s.event = xEvent{kind: evSetQuota, inst: rapid.IntRange(0, p.instances-1).Draw(rt, "event instance"),
			tenant: rapid.IntRange(0, nt-1).Draw(rt, "event tenant"), quota: drawXQuota(rt, p.interval)}
	case 3:
		s.event = xEvent{kind: evDeleteQuota, inst: rapid.IntRange(0, p.instances-1).Draw(rt, "event instance"),
			tenant: rapid.IntRange(0, nt-1).Draw(rt, "event tenant")}
	case 4:
		s.event = xEvent{kind: evDown}
	case 5:
		s.event = xEvent{kind: evUp}
	case 6:
		s.event = xEvent{kind: evRestart, inst: rapid.IntRange(0, p.instances-1).Draw(rt, "event instance")}
	}
	for range rapid.IntRange(1, 6).Draw(rt, "ops") {
		o := xOp{
			kind: xOpKind(rapid.IntRange(0, int(numXOps)-1).Draw(rt, "op")),
			inst: rapid.IntRange(0, p.instances-1).Draw(rt, "op instance"),
			n:    xNs[rapid.IntRange(0, len(xNs)-1).Draw(rt, "n")],
		}
		if o.kind == opClose && rapid.IntRange(0, 2).Draw(rt, "close really") > 0 {
			o.kind = opAllowN // Close less often than the rest
		}
		o.nRand = rapid.Uint64().Draw(rt, "n random")
		o.deadline = pick(rt, "deadline", []time.Duration{0, -1, 1, 5 * p.interval}, func() time.Duration {
			return logDuration(rt, "deadline log", 1, 10*p.interval)
		})
		o.within = pick(rt, "within", []time.Duration{0, 1, maxDuration, p.interval}, nil)
		o.pick = rapid.IntRange(0, 7).Draw(rt, "refund pick")
		k := 1
		if o.kind == opAllowAll || o.kind == opWaitAll || o.kind == opAllowAllWithin {
			k = rapid.IntRange(0, 5).Draw(rt, "call tenants")
		}
		for range k {
			o.tenants = append(o.tenants, rapid.IntRange(0, nt-1).Draw(rt, "op tenant"))
		}
		s.ops = append(s.ops, o)
	}
	s.advance = pick(rt, "advance", []time.Duration{0, 1, p.interval / 4, p.interval, 10 * p.interval, 3 * p.interval}, nil)
	return s
}

// machineClock reads the machine's time inside a synctest bubble, where
// time.Now is the fake clock: a goroutine outside the bubble stores the
// real time elapsed since it started, every few milliseconds.
type machineClock struct {
	ns   atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func startMachineClock() *machineClock {
	c := &machineClock{stop: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(c.done)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tk.C:
				c.ns.Store(int64(time.Since(start)))
			}
		}
	}()
	return c
}

func (c *machineClock) now() time.Duration { return time.Duration(c.ns.Load()) }

func (c *machineClock) close() { close(c.stop); <-c.done }

// xProgress is what the watchdog, outside the bubble, reports.
type xProgress struct {
	mu       sync.Mutex
	step     int
	seq      int
	inFlight map[int]string // by seq
}

func (g *xProgress) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	calls := slices.Sorted(func(yield func(string) bool) {
		for _, s := range g.inFlight {
			if !yield(s) {
				return
			}
		}
	})
	return fmt.Sprintf("step %d, calls in flight: %s", g.step, strings.Join(calls, "; "))
}

// runXPlan runs p in a synctest bubble and returns its failures.
func runXPlan(t *testing.T, p *xPlan, cov *xCoverage) (fails []string) {
	cov.checks.Add(1)
	clock := startMachineClock()
	defer clock.close()
	prog := &xProgress{inFlight: map[int]string{}}
	dog := time.AfterFunc(extremeWatchdog, func() {
		panic(fmt.Sprintf("extreme: no progress in %v of the machine's time (a goroutine spins without blocking): %s\n%s", extremeWatchdog, prog, p))
	})
	defer dog.Stop()
	synctest.Test(t, func(t *testing.T) {
		r := &xRun{t: t, p: p, clock: clock, prog: prog, start: time.Now(), cov: cov}
		fails = r.run()
	})
	return fails
}

// xRun is one check running.
type xRun struct {
	t     *testing.T
	p     *xPlan
	clock *machineClock
	prog  *xProgress
	cov   *xCoverage
	start time.Time
	net   *xNet
	insts []*xInst
	byNm  map[string]*xTenant
	ten   []*xTenant

	failed atomic.Bool // a store call failed: admissions of AllowAll and Allow are no longer counted
	// Used by the goroutine that runs the plan only.
	started   int // limiters started so far
	everAlive int // the most limiters open at once

	mu    sync.Mutex // guards the fields below and the xTenants' counters
	fails []string
	kept  []*xKept // admissions kept for Refund
}

type xInst struct {
	l       *leasequota.Limiter
	id      string
	closed  atomic.Bool // its Close has returned
	closing atomic.Bool // its Close has begun (or is about to)
}

// xTenant is a tenant's history, for the bounds. Guarded by xRun.mu.
type xTenant struct {
	name     string
	base     leasequota.Quota
	cur      leasequota.Quota // the quota in force as the test knows it: base or the last override
	maxRate  float64
	maxBurst int64
	maxLease int64 // the largest MaxLease any of its quotas had, resolved
	maxAsked int64 // the largest valid n a request asked for
	admitted int64 // from leases, net of refunds
	granted  int64
	credited float64
	shares   shareTally
	changes  []xChange
	// clock is the latest time of the tenant's bucket the store replied
	// with (see checkTenantLocked).
	clock time.Time
}

type xChange struct {
	at       time.Time
	admitted int64   // the tenant's admitted then
	shared   float64 // what its rate shares had issued then
	quota    leasequota.Quota
	slack    float64 // what instances may hold of grants before the change
}

// xKept is an admission kept for Refund.
type xKept struct {
	in      *xInst
	d       leasequota.Decision
	names   []string // the call's tenants (nil for AllowN's)
	tenants []int
	n       int64
	counted bool // its tokens were counted in the tenants' admitted
}

func (r *xRun) failf(format string, args ...any) {
	msg := fmt.Sprintf("at %v: ", time.Since(r.start)) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	if len(r.fails) < 20 {
		r.fails = append(r.fails, msg)
	}
	r.mu.Unlock()
}

func (r *xRun) defaults() quota.Defaults {
	return quota.Defaults{LeaseTTL: r.p.leaseTTL, FailureMode: r.p.mode, Interval: r.p.interval}
}

func (r *xRun) options() []leasequota.Option {
	p := r.p
	opts := []leasequota.Option{
		leasequota.WithLogger(testLogger(r.t)),
		leasequota.WithRefreshInterval(p.interval),
		leasequota.WithLeaseTTL(p.leaseTTL),
		leasequota.WithColdStartWait(p.coldWait),
		leasequota.WithMaxWait(p.maxWait),
		leasequota.WithMaxTenants(p.maxTen),
		leasequota.WithIdleTimeout(p.idle),
		leasequota.WithExpectedInstances(p.expected),
		leasequota.WithReservation(p.reserve),
		leasequota.WithRateShares(p.period, p.headroom),
		leasequota.WithPerCPUTokens(p.perCPU),
		leasequota.WithFailureMode(p.mode),
		leasequota.WithSeed(p.seed + uint64(r.started)),
		leasequota.WithInstanceID(fmt.Sprintf("x%d", r.started)),
	}
	if p.timeout > 0 {
		opts = append(opts, leasequota.WithRedisTimeout(p.timeout))
	}
	if p.useFunc {
		opts = append(opts, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if tn, ok := r.byNm[tenant]; ok {
				return tn.base
			}
			return leasequota.Quota{} // invalid: no such tenant
		}))
		if p.refresh > 0 {
			opts = append(opts, leasequota.WithQuotaRefresh(p.refresh))
		}
	} else {
		opts = append(opts, leasequota.WithDefaultQuota(p.tenants[0].quota))
	}
	return opts
}

func (r *xRun) startLimiter() *xInst {
	l, err := leasequota.NewWithStore(r.net, r.options()...)
	r.started++
	if err != nil {
		r.failf("NewWithStore with valid options: %v", err)
		return nil
	}
	return &xInst{l: l, id: fmt.Sprintf("x%d", r.started-1)}
}

func (r *xRun) alive() int {
	n := 0
	for _, in := range r.insts {
		if in != nil && !in.closed.Load() {
			n++
		}
	}
	return n
}

func (r *xRun) run() []string {
	ignore := goleak.IgnoreCurrent()
	r.net = &xNet{r: r, store: memstore.New()}
	r.byNm = map[string]*xTenant{}
	for _, tp := range r.p.tenants {
		tn := &xTenant{name: tp.name, base: tp.quota, cur: tp.quota}
		tn.note(r.defaults(), tp.quota)
		r.ten = append(r.ten, tn)
		r.byNm[tp.name] = tn
	}
	r.insts = make([]*xInst, r.p.instances)
	for i := range r.insts {
		r.insts[i] = r.startLimiter()
		if r.insts[i] == nil {
			return r.fails
		}
	}
	r.everAlive = len(r.insts)
	for i, s := range r.p.steps {
		r.prog.mu.Lock()
		r.prog.step = i
		r.prog.mu.Unlock()
		r.event(s.event)
		var wg sync.WaitGroup
		for _, o := range s.ops {
			wg.Go(func() { r.do(o) })
		}
		wg.Wait()
		time.Sleep(s.advance)
		r.checkBounds()
	}
	for _, in := range r.insts {
		if in != nil && !in.closed.Load() {
			r.close(in, time.Minute)
		}
	}
	r.checkBounds()
	if err := goleak.Find(ignore); err != nil {
		r.failf("goroutines outlived Close: %v", err)
	}
	return r.fails
}

// note takes q as one of the tenant's quotas, for the bounds.
func (tn *xTenant) note(d quota.Defaults, q leasequota.Quota) {
	tn.maxRate, tn.maxBurst = max(tn.maxRate, q.Rate), max(tn.maxBurst, q.Burst)
	tn.maxLease = max(tn.maxLease, d.Resolve(q).MaxLease)
}

func (r *xRun) event(e xEvent) {
	switch e.kind {
	case evSetQuota, evDeleteQuota:
		in := r.insts[e.inst]
		if in == nil || in.closed.Load() {
			return
		}
		tn := r.ten[e.tenant]
		q := e.quota
		if e.kind == evDeleteQuota {
			q = tn.base
		}
		r.mu.Lock()
		// What instances may hold of grants before the change: a lease
		// target and the batch about to expire each (design.md), of the
		// largest MaxLease the tenant had, and what a request asked for
		// beyond it (a request short of n tokens has its lease call ask
		// for n, MaxLease or not, and one that gave up leaves them held:
		// design.md does not count these); with reservations, what the
		// largest rate reserves over one, ahead of the bucket's clock.
		slack := float64(r.everAlive) * (2*float64(tn.maxLease) + float64(tn.maxAsked))
		if r.p.reserve > 0 {
			slack += float64(r.everAlive) * tn.maxRate * (r.p.reserve + lease.ReserveAhead).Seconds()
		}
		tn.note(r.defaults(), q)
		ch := xChange{at: time.Now(), admitted: tn.admitted, shared: tn.shares.issued(time.Now()), quota: q, slack: slack}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		if e.kind == evSetQuota {
			err = in.l.SetQuota(ctx, tn.name, q)
		} else {
			err = in.l.DeleteQuota(ctx, tn.name)
		}
		if err != nil && !r.net.down.Load() {
			r.failf("%v of %q, the store up: %v", e.kind, tn.name, err)
		}
		if err == nil || errors.Is(err, lease.ErrQuotaVersion) {
			r.mu.Lock()
			tn.cur = q
			tn.changes = append(tn.changes, ch)
			r.cov.changes.Add(1)
			r.mu.Unlock()
		}
	case evDown:
		r.cov.downs.Add(1)
		r.net.down.Store(true)
		r.failed.Store(true)
	case evUp:
		r.net.down.Store(false)
	case evRestart:
		if in := r.insts[e.inst]; in == nil || in.closed.Load() {
			r.insts[e.inst] = r.startLimiter()
			r.everAlive = max(r.everAlive, r.alive())
		}
	}
}

// nFor resolves o's n for tenant tn.
func (r *xRun) nFor(o xOp, tn *xTenant) int64 {
	r.mu.Lock()
	b := tn.cur.Burst
	r.mu.Unlock()
	switch o.n {
	case nRandom:
		return 1 + int64(o.nRand%uint64(b))
	case nBurst:
		return b
	case nTwo:
		return 2
	case nAboveBurst:
		return b + 1
	case nZero:
		return 0
	case nNegative:
		return -1
	case nMaxInt:
		return math.MaxInt64
	case nMinInt:
		return math.MinInt64
	}
	return 1
}

// invalidN reports whether n can never be admitted for tn.
func (r *xRun) invalidN(tn *xTenant, n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return n <= 0 || n > tn.maxBurst
}

// waitCap is the longest AllowN waits without a ctx deadline.
func (r *xRun) waitCap() time.Duration { return max(r.p.coldWait, r.p.maxWait) }

func addSat(t time.Time, d time.Duration) time.Time {
	if d > leasequota.MaxLeaseTTL*365*100 {
		d = leasequota.MaxLeaseTTL * 365 * 100 // a century: past any deadline of a plan
	}
	return t.Add(d)
}

func (r *xRun) do(o xOp) {
	in := r.insts[o.inst]
	if in == nil {
		return
	}
	tn := r.ten[0] // the tenant n is chosen by, for an *All call of no tenant
	if len(o.tenants) > 0 {
		tn = r.ten[o.tenants[0]]
	}
	n := r.nFor(o, tn)
	if o.kind == opAllow {
		n = 1
	}
	closedBefore := in.closed.Load()
	start, realStart := time.Now(), r.clock.now()
	desc := fmt.Sprintf("i%s %s(%.20q.., n=%d, deadline %v)", in.id, xOpNames[o.kind], tn.name, n, o.deadline)
	r.prog.mu.Lock()
	r.prog.seq++
	seq := r.prog.seq
	r.prog.inFlight[seq] = desc
	r.prog.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			r.failf("%s panicked: %v\n%s", desc, p, debug.Stack())
		}
		r.prog.mu.Lock()
		delete(r.prog.inFlight, seq)
		r.prog.mu.Unlock()
		if took := r.clock.now() - realStart; took > extremeCallLimit {
			r.failf("%s took %v of the machine's time", desc, took)
		}
	}()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(max(o.deadline, 0)))
	defer cancel()
	if o.deadline < 0 {
		cancel()
	}
	deadline := start.Add(max(o.deadline, 0))
	late := func(limit time.Time) {
		if now := time.Now(); now.After(limit) {
			r.failf("%s returned %v after its deadline", desc, now.Sub(limit))
		}
	}
	names := make([]string, len(o.tenants))
	r.mu.Lock()
	for i, k := range o.tenants {
		names[i] = r.ten[k].name
		if tk := r.ten[k]; n > 0 && n <= tk.maxBurst {
			tk.maxAsked = max(tk.maxAsked, n)
		}
	}
	r.mu.Unlock()
	l := in.l
	switch o.kind {
	case opAllowN, opAllow:
		if o.kind == opAllow && r.waitCap() <= 10*r.p.interval {
			ok := l.Allow(tn.name)
			late(addSat(start, r.waitCap()))
			r.single(o, in, tn, n, leasequota.Decision{Allowed: ok, Tenant: tn.name}, nil, closedBefore, false)
			return
		}
		d := l.AllowN(ctx, tn.name, n)
		late(minTime(deadline, addSat(start, r.waitCap())))
		r.single(o, in, tn, n, d, nil, closedBefore, true)
	case opWaitN:
		d, err := l.WaitN(ctx, tn.name, n)
		late(deadline)
		r.single(o, in, tn, n, d, err, closedBefore, true)
	case opAllowNWithin:
		d := l.AllowNWithin(ctx, tn.name, n, o.within)
		late(minTime(deadline, addSat(addSat(start, r.waitCap()), o.within)))
		r.single(o, in, tn, n, d, nil, closedBefore, true)
	case opAllowAll, opWaitAll, opAllowAllWithin:
		var (
			d   leasequota.Decision
			err error
		)
		switch o.kind {
		case opAllowAll:
			d = l.AllowAll(ctx, n, names...)
		case opWaitAll:
			d, err = l.WaitAll(ctx, n, names...)
		default:
			d = l.AllowAllWithin(ctx, n, o.within, names...)
		}
		late(deadline)
		r.multi(o, in, names, n, d, err, closedBefore)
	case opRefund:
		r.refund(o, in)
		late(start)
	case opInvalidate:
		l.Invalidate(tn.name)
		late(start)
	case opLook:
		info, ok := l.Tenant(tn.name)
		if ok && (info.Tokens < 0 || info.Quota.Validate() != nil) {
			r.failf("%s: Tenant says %+v", desc, info)
		}
		if q, ok := l.TrackedQuota(tn.name); ok && q.Validate() != nil {
			r.failf("%s: TrackedQuota says %+v", desc, q)
		}
		l.Stats()
		l.Tenants()
		l.Degraded()
		late(start)
	case opClose:
		r.close(in, o.deadline)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// close closes in's limiter with a ctx of deadline d and checks it.
func (r *xRun) close(in *xInst, d time.Duration) {
	first := !in.closing.Swap(true) // later calls return the first one's result
	down := r.net.down.Load()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), max(d, 0))
	defer cancel()
	if d < 0 {
		cancel()
	}
	err := in.l.Close(ctx)
	in.closed.Store(true)
	r.cov.closes.Add(1)
	// Close waits for a lease call in flight (its deadline), a read of
	// the quota version and a count of the roster (min(lease TTL, 1 s)
	// each, twice on a silent store), then returns tokens within ctx or
	// a lease call's deadline.
	timeout := r.p.timeout
	if timeout == 0 {
		timeout = max(r.p.interval/2, 10*time.Millisecond)
	}
	limit := addSat(addSat(start, max(d, 0)+2*timeout+10*time.Millisecond), 4*min(r.p.leaseTTL, time.Second))
	if now := time.Now(); now.After(limit) {
		r.failf("i%s Close(%v) took %v on the fake clock", in.id, d, now.Sub(start))
	}
	if err != nil && first && !down && !r.net.down.Load() {
		r.failf("i%s Close(%v), the store up: %v", in.id, d, err)
	}
	if again := in.l.Close(context.Background()); again != err {
		r.failf("i%s Close again: %v, then %v", in.id, err, again)
	}
}

// single checks the decision of a one-tenant call and counts what it
// admitted. hasD: d is the call's Decision (not Allow's bool).
func (r *xRun) single(o xOp, in *xInst, tn *xTenant, n int64, d leasequota.Decision, err error, closedBefore, hasD bool) {
	desc := fmt.Sprintf("i%s %s(%.20q.., %d)", in.id, xOpNames[o.kind], tn.name, n)
	waits := o.kind == opWaitN
	if closedBefore && (d.Allowed || hasD && d.Reason != leasequota.ReasonClosed || waits && !errors.Is(err, leasequota.ErrClosed)) {
		r.failf("%s after Close returned: %+v, %v", desc, d, err)
	}
	if r.invalidN(tn, n) {
		if d.Allowed {
			r.failf("%s admitted n=%d (largest Burst %d)", desc, n, tn.maxBurst)
		}
		if hasD {
			switch d.Reason {
			case leasequota.ReasonInvalidN, leasequota.ReasonClosed, leasequota.ReasonTooManyTenants:
			default:
				r.failf("%s of an invalid n denied with %v, not invalid_n", desc, d.Reason)
			}
		}
	}
	if waits {
		if (err == nil) != d.Allowed {
			r.failf("%s: %+v with error %v", desc, d, err)
		}
		if d.Reason == leasequota.ReasonInvalidN && !(n <= 0 && errors.Is(err, leasequota.ErrInvalidN) || n > 0 && errors.Is(err, leasequota.ErrExceedsBurst)) {
			r.failf("%s denied with invalid_n and error %v", desc, err)
		}
	}
	if !hasD {
		if d.Allowed && !r.failed.Load() && !r.net.down.Load() {
			r.admit(tn, n)
		}
		return
	}
	if d.Tenant != tn.name {
		r.failf("%s: Decision.Tenant %q", desc, d.Tenant)
	}
	r.checkDecision(desc, n, d, r.maxBurstIfChanged(o.tenants))
	if fromLease(d) {
		r.admit(tn, n)
		if !in.closing.Load() {
			r.keep(&xKept{in: in, d: d, tenants: o.tenants, n: n, counted: true})
		}
	} else if d.Allowed {
		r.keep(&xKept{in: in, d: d, tenants: o.tenants, n: n})
	}
}

// maxBurstIfChanged returns the largest Burst the tenants had, if the
// quota of any changed, else 0.
func (r *xRun) maxBurstIfChanged(tenants []int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b int64
	changed := false
	for _, k := range tenants {
		b = max(b, r.ten[k].maxBurst)
		changed = changed || len(r.ten[k].changes) > 0
	}
	if !changed {
		return 0
	}
	return b
}

// checkDecision holds any decision of n tokens to the contract. burst,
// when not 0, is the largest Burst the tenants had, their quota changed:
// a request checks n against the quota in force on its instance when it
// starts, and an admission that waited reports the quota after its wait
// (the lease call may have brought a change), so it may admit more than
// the Burst it reports.
func (r *xRun) checkDecision(desc string, n int64, d leasequota.Decision, burst int64) {
	if d.Reason.String() == "unknown" {
		r.failf("%s: unknown reason %d: %+v", desc, d.Reason, d)
	}
	if d.RetryAfter < 0 || d.Remaining < 0 {
		r.failf("%s: RetryAfter %v, Remaining %d", desc, d.RetryAfter, d.Remaining)
	}
	if d.Reason == leasequota.ReasonInvalidQuota {
		r.failf("%s: invalid_quota for a valid quota: %+v", desc, d)
	}
	if d.Allowed {
		if n < 1 || burst == 0 && n > d.Quota.Burst || n > burst && burst > 0 {
			r.failf("%s admitted under a Burst of %d (the largest it had after a change: %d)", desc, d.Quota.Burst, burst)
		}
		if d.RetryAfter != 0 || d.FleetRemaining < d.Remaining {
			r.failf("%s admitted with RetryAfter %v, Remaining %d, FleetRemaining %d", desc, d.RetryAfter, d.Remaining, d.FleetRemaining)
		}
		switch d.Reason {
		case leasequota.ReasonLeased, leasequota.ReasonColdStart, leasequota.ReasonRefilled, leasequota.ReasonFallback, leasequota.ReasonFailOpen:
		default:
			r.failf("%s admitted with reason %v", desc, d.Reason)
		}
		return
	}
	if d.Reason == leasequota.ReasonInvalidN && n > 0 && n <= d.Quota.Burst {
		r.failf("%s denied as invalid_n under a Burst of %d", desc, d.Quota.Burst)
	}
	if d.Reason.Waitable() && d.RetryAfter <= 0 {
		r.failf("%s: a waitable denial (%v) with RetryAfter %v", desc, d.Reason, d.RetryAfter)
	}
}

// multi checks the decision of an AllowAll, WaitAll or AllowAllWithin
// and counts what it admitted: n of each tenant, unless a store call
// ever failed (a tenant's failure mode may then have admitted it
// without a lease: undercounting only loosens the bounds).
func (r *xRun) multi(o xOp, in *xInst, names []string, n int64, d leasequota.Decision, err error, closedBefore bool) {
	desc := fmt.Sprintf("i%s %s(%d, %.20q)", in.id, xOpNames[o.kind], n, names)
	waits := o.kind == opWaitAll
	if closedBefore && (d.Allowed || d.Reason != leasequota.ReasonClosed || waits && !errors.Is(err, leasequota.ErrClosed)) {
		r.failf("%s after Close returned: %+v, %v", desc, d, err)
	}
	if waits && (err == nil) != d.Allowed {
		r.failf("%s: %+v with error %v", desc, d, err)
	}
	dup := false
	for i := range names {
		dup = dup || slices.Contains(names[:i], names[i])
	}
	invalid := false
	for _, k := range o.tenants {
		invalid = invalid || r.invalidN(r.ten[k], n)
	}
	switch {
	case len(names) == 0:
		if d.Allowed || d.Reason != leasequota.ReasonNoTenants && d.Reason != leasequota.ReasonClosed ||
			waits && d.Reason == leasequota.ReasonNoTenants && !errors.Is(err, leasequota.ErrNoTenants) {
			r.failf("%s of no tenant: %+v, %v", desc, d, err)
		}
		return
	case dup && len(names) > 1:
		if d.Allowed || d.Reason != leasequota.ReasonDuplicateTenant && d.Reason != leasequota.ReasonClosed ||
			waits && d.Reason == leasequota.ReasonDuplicateTenant && !errors.Is(err, leasequota.ErrDuplicateTenant) {
			r.failf("%s naming a tenant twice: %+v, %v", desc, d, err)
		}
		return
	case invalid:
		if d.Allowed {
			r.failf("%s admitted an invalid n", desc)
		}
		switch d.Reason {
		case leasequota.ReasonInvalidN, leasequota.ReasonClosed, leasequota.ReasonTooManyTenants:
		default:
			r.failf("%s of an invalid n denied with %v, not invalid_n", desc, d.Reason)
		}
	}
	if d.Reason != leasequota.ReasonClosed && !slices.Contains(names, d.Tenant) {
		r.failf("%s: Decision.Tenant %q is none of the call's", desc, d.Tenant)
	}
	r.checkDecision(desc, n, d, r.maxBurstIfChanged(o.tenants))
	if !d.Allowed {
		return
	}
	counted := len(names) == 1 && fromLease(d) || len(names) > 1 && !r.failed.Load()
	if counted {
		for _, k := range o.tenants {
			r.admit(r.ten[k], n)
		}
	}
	if !in.closing.Load() {
		r.keep(&xKept{in: in, d: d, names: names, tenants: o.tenants, n: n, counted: counted})
	}
}

func (r *xRun) keep(k *xKept) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.kept) >= 8 {
		r.kept = r.kept[1:]
	}
	r.kept = append(r.kept, k)
}

// refund refunds an admission kept, and checks that a second Refund of
// it refunds nothing. The tokens leave the tenants' admitted count
// before the call (another request may spend them the moment they are
// back), and come back to it if the Refund refused.
func (r *xRun) refund(o xOp, caller *xInst) {
	r.mu.Lock()
	if len(r.kept) == 0 {
		r.mu.Unlock()
		return
	}
	i := o.pick % len(r.kept)
	k := r.kept[i]
	r.kept = slices.Delete(r.kept, i, i+1)
	if k.counted {
		for _, t := range k.tenants {
			r.ten[t].admitted -= k.n
		}
	}
	r.mu.Unlock()
	closed := k.in.closed.Load()
	err := k.in.l.Refund(&k.d, k.names...)
	if err != nil && k.counted {
		r.mu.Lock()
		for _, t := range k.tenants {
			r.ten[t].admitted += k.n
		}
		r.mu.Unlock()
	}
	desc := fmt.Sprintf("i%s Refund(%+v, %q)", k.in.id, k.d, k.names)
	leased := k.d.Reason == leasequota.ReasonLeased || k.d.Reason == leasequota.ReasonColdStart || k.d.Reason == leasequota.ReasonRefilled
	switch {
	case closed && err != nil && !errors.Is(err, leasequota.ErrClosed) && !errors.Is(err, leasequota.ErrNotRefundable):
		r.failf("%s after Close: %v", desc, err)
	case !closed && leased && err != nil && !(errors.Is(err, leasequota.ErrClosed) && k.in.closing.Load()):
		r.failf("%s of a lease's admission: %v", desc, err)
	case !leased && len(k.names) <= 1 && !errors.Is(err, leasequota.ErrNotRefundable) && !errors.Is(err, leasequota.ErrClosed):
		r.failf("%s of an admission without a lease: %v, want ErrNotRefundable", desc, err)
	}
	if err == nil {
		r.cov.refunds.Add(1)
		if again := k.in.l.Refund(&k.d, k.names...); !errors.Is(again, leasequota.ErrNotRefundable) {
			r.failf("%s again: %v, want ErrNotRefundable", desc, again)
		}
	}
}

// admit counts n tokens of tn admitted from leases, and checks the
// bounds.
func (r *xRun) admit(tn *xTenant, n int64) {
	r.cov.admits.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	tn.admitted += n
	r.checkTenantLocked(tn)
}

func (r *xRun) checkBounds() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tn := range r.ten {
		r.checkTenantLocked(tn)
	}
}

// exceeds reports whether got is above bound, allowing for float64's
// rounding of sums near 2^40 tokens and 1e12 tokens a second.
func exceeds(got, bound float64) bool { return got > bound+1e-6+1e-9*math.Abs(bound) }

func (r *xRun) checkTenantLocked(tn *xTenant) {
	now := time.Now()
	got := float64(tn.admitted)
	shared := tn.shares.issued(now)
	// T is on the bucket's clock: a call that finds the store's clock not
	// past the bucket's last call takes the time a microsecond after it
	// (lease/memstore's doc, common.lua's read_bucket), so that a
	// bucket's calls have distinct times. On Redis a script takes longer
	// than that; on memstore in a bubble, whose clock stands still while
	// goroutines run, calls at one instant move the bucket's clock a
	// microsecond each, and at a rate of 1e12 a second each refills a
	// million tokens. (A reservation's frozen bucket runs ahead of the
	// clock too, by at most lease.ReserveAhead; its tokens are committed.)
	bucketNow := maxTime(now, tn.clock)
	if ledger := float64(tn.granted) + shared - tn.credited; exceeds(got, ledger) {
		r.fails = append(r.fails, fmt.Sprintf("at %v: tenant %.20q admitted %d from leases, more than granted %d + issued by rate shares %.3f - credited %.3f",
			now.Sub(r.start), tn.name, tn.admitted, tn.granted, shared, tn.credited))
	}
	if bound := float64(tn.maxBurst) + tn.maxRate*bucketNow.Sub(r.start).Seconds(); exceeds(got, bound) {
		r.fails = append(r.fails, fmt.Sprintf("at %v: tenant %.20q admitted %d, past Burst + Rate*T = %.1f", now.Sub(r.start), tn.name, tn.admitted, bound))
	}
	// Since the last change (each was checked while it was the last).
	if len(tn.changes) > 0 {
		c := tn.changes[len(tn.changes)-1]
		since := float64(tn.admitted - c.admitted)
		bound := float64(c.quota.Burst) + c.quota.Rate*bucketNow.Sub(c.at).Seconds() + c.slack + (shared - c.shared)
		if exceeds(since, bound) {
			r.fails = append(r.fails, fmt.Sprintf("at %v: tenant %.20q admitted %.0f since its quota became %+v at %v: past B + r*T + what instances held, issued by shares = %.1f (slack %.1f)",
				now.Sub(r.start), tn.name, since, c.quota, c.at.Sub(r.start), bound, c.slack))
		}
	}
}

// xNet is the store the limiters share: memstore, recording what it
// granted, issued as rate shares and credited, and down on demand
// (every call fails at once, unapplied).
type xNet struct {
	r     *xRun
	store *memstore.Store
	down  atomic.Bool
}

var errXDown = errors.New("extreme: store down")

func (n *xNet) Instance(id string, window time.Duration) (lease.Store, error) {
	v, err := n.store.Instance(id, window)
	if err != nil {
		return nil, err
	}
	return &xView{n: n, id: id, inner: v}, nil
}

type xView struct {
	n     *xNet
	id    string
	inner lease.Store
}

// up reports whether the store is up; when it is not, the call fails and
// the run notes that a call failed.
func (v *xView) up() bool {
	if v.n.down.Load() {
		v.n.r.failed.Store(true)
		return false
	}
	return true
}

func (v *xView) failedIf(err error) error {
	if err != nil {
		v.n.r.failed.Store(true)
	}
	return err
}

func (v *xView) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if !v.up() {
		return nil, errXDown
	}
	out, err := v.inner.AcquireMany(ctx, reqs, results)
	r := v.n.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, res := range out {
		if res.Err != nil {
			r.failed.Store(true)
			continue
		}
		tn := r.byNm[reqs[i].Tenant]
		if tn == nil {
			r.fails = append(r.fails, fmt.Sprintf("acquire of an unknown tenant %q", reqs[i].Tenant))
			continue
		}
		tn.granted += res.Grant.Granted
		tn.clock = maxTime(tn.clock, res.Grant.ServerTime)
		if rs := res.Grant.RateShare; rs.Held() && rs.From.Equal(res.Grant.ServerTime) {
			r.cov.shares.Add(1)
		}
		tn.shares.note(v.id, res.Grant.RateShare, res.Grant.ServerTime)
	}
	return out, v.failedIf(err)
}

func (v *xView) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	if !v.up() {
		out := make([]lease.ReleaseResult, len(reqs))
		for i := range out {
			out[i].Err = errXDown
		}
		return out
	}
	out := v.inner.ReleaseMany(ctx, reqs)
	r := v.n.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, res := range out {
		if res.Err != nil {
			r.failed.Store(true)
			continue
		}
		if tn := r.byNm[reqs[i].Tenant]; tn != nil {
			tn.credited += res.Return.Credited
			tn.clock = maxTime(tn.clock, res.Return.ServerTime)
		}
	}
	return out
}

func (v *xView) GetOverride(ctx context.Context, tenant string) (*lease.Override, error) {
	if !v.up() {
		return nil, errXDown
	}
	o, err := v.inner.GetOverride(ctx, tenant)
	return o, v.failedIf(err)
}

func (v *xView) SetOverride(ctx context.Context, tenant string, base lease.Limits, o lease.Override) (float64, error) {
	if !v.up() {
		return 0, errXDown
	}
	f, err := v.inner.SetOverride(ctx, tenant, base, o)
	return f, v.failedIf(err)
}

func (v *xView) DeleteOverride(ctx context.Context, tenant string, base lease.Limits) (float64, error) {
	if !v.up() {
		return 0, errXDown
	}
	f, err := v.inner.DeleteOverride(ctx, tenant, base)
	return f, v.failedIf(err)
}

func (v *xView) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	return v.inner.ListOverrides(ctx)
}

func (v *xView) QuotaVersion(ctx context.Context) (int64, error) {
	if !v.up() {
		return 0, errXDown
	}
	ver, err := v.inner.QuotaVersion(ctx)
	return ver, v.failedIf(err)
}

// CountInstances and LeaveRoster pass the fleet's roster through, so
// that the limiters size their call windows and leave the roster at
// Close as they do on Redis.
func (v *xView) CountInstances(ctx context.Context) (int, error) {
	c, ok := v.inner.(lease.InstanceCounter)
	if !ok {
		return 0, errors.New("extreme: memstore counts no instances")
	}
	if !v.up() {
		return 0, errXDown
	}
	return c.CountInstances(ctx)
}

func (v *xView) LeaveRoster(ctx context.Context) error {
	c, ok := v.inner.(lease.RosterLeaver)
	if !ok {
		return nil
	}
	if !v.up() {
		return errXDown
	}
	return c.LeaveRoster(ctx)
}
