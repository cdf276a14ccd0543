package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// These tests break Redis, or the network to it, under load and check
// what issue 5 promises (docs/failure-modes.md): no request waits longer
// than its ctx allows, admissions from leases stay inside the global
// bound (plus one burst per time Redis lost its data), degraded decisions
// are counted, and leasing resumes on its own.

// faultCallSlack is how far past its ctx deadline an AllowN may return: the
// time for a woken goroutine to run again on a loaded two-core CI machine
// with the race detector on.
const faultCallSlack = 50 * time.Millisecond

// faultLoad drives a Limiter from several goroutines at a steady offered rate
// and records every decision.
type faultLoad struct {
	l          *leasequota.Limiter
	tenants    []string
	perSec     float64       // requests per second per tenant, all goroutines together
	goroutines int           // goroutines, each asking for every tenant in turn
	timeout    time.Duration // ctx deadline of each AllowN
	slowAfter  time.Duration // calls taking longer are counted in slow

	stop  chan struct{}
	wg    sync.WaitGroup
	began time.Time
	ended time.Time

	calls      atomic.Int64
	maxLatency atomic.Int64 // nanoseconds
	// maxLate is how much later than asked the load's pacing sleeps
	// woke, at most (nanoseconds): what the machine delivered to a woken
	// goroutine during the run, which checkLatency allows an AllowN too.
	maxLate  atomic.Int64
	slow     atomic.Int64
	byReason [16][2]atomic.Int64 // [Reason][Allowed]
	// Per tenant: admissions from a lease (Allowed, Mode FailDefault), and
	// the unix nanoseconds of the last one.
	leased     []atomic.Int64
	lastLeased []atomic.Int64
	// Per tenant: decisions made by a failure mode, admitted.
	degradedAllowed []atomic.Int64
}

// startFaultLoad starts the goroutines; stopLoad ends them.
func startFaultLoad(l *leasequota.Limiter, tenants []string, perSec float64, goroutines int, timeout, slowAfter time.Duration) *faultLoad {
	ld := &faultLoad{
		l: l, tenants: tenants, perSec: perSec, goroutines: goroutines,
		timeout: timeout, slowAfter: slowAfter,
		stop:            make(chan struct{}),
		leased:          make([]atomic.Int64, len(tenants)),
		lastLeased:      make([]atomic.Int64, len(tenants)),
		degradedAllowed: make([]atomic.Int64, len(tenants)),
	}
	ld.began = time.Now()
	for g := 0; g < goroutines; g++ {
		ld.wg.Add(1)
		go ld.run()
	}
	return ld
}

func (ld *faultLoad) run() {
	defer ld.wg.Done()
	began := time.Now()
	rate := ld.perSec / float64(ld.goroutines) // rounds over the tenants per second
	var sent int64
	for {
		select {
		case <-ld.stop:
			return
		default:
		}
		due := int64(time.Since(began).Seconds() * rate)
		if lag := int64(rate / 10); due-sent > lag {
			sent = due - lag // fell behind (calls waited): do not pile up
		}
		for ; sent < due; sent++ {
			for i := range ld.tenants {
				ld.call(i)
			}
		}
		slept := time.Now()
		time.Sleep(time.Millisecond) // pacing the offered load, not waiting for a condition
		storeMax(&ld.maxLate, int64(time.Since(slept)-time.Millisecond))
	}
}

// storeMax raises m to v when v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

func (ld *faultLoad) call(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), ld.timeout)
	start := time.Now()
	d := ld.l.AllowN(ctx, ld.tenants[i], 1)
	end := time.Now()
	cancel()
	took := end.Sub(start)
	ld.calls.Add(1)
	storeMax(&ld.maxLatency, int64(took))
	if took > ld.slowAfter {
		ld.slow.Add(1)
	}
	a := 0
	if d.Allowed {
		a = 1
	}
	ld.byReason[d.Reason%16][a].Add(1)
	switch {
	case d.Allowed && d.Mode == leasequota.FailDefault:
		ld.leased[i].Add(1)
		ld.lastLeased[i].Store(end.UnixNano())
	case d.Allowed:
		ld.degradedAllowed[i].Add(1)
	}
}

// stopLoad ends the goroutines and waits for them.
func (ld *faultLoad) stopLoad() {
	close(ld.stop)
	ld.wg.Wait()
	ld.ended = time.Now()
}

func (ld *faultLoad) count(r leasequota.Reason, allowed bool) int64 {
	a := 0
	if allowed {
		a = 1
	}
	return ld.byReason[r%16][a].Load()
}

// leasedAll returns the admissions from leases over all tenants.
func (ld *faultLoad) leasedAll() int64 {
	var n int64
	for i := range ld.leased {
		n += ld.leased[i].Load()
	}
	return n
}

// summary is a line for the test log.
func (ld *faultLoad) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls in %v, max latency %v, over %v: %d; pacing sleeps woke up to %v late;", ld.calls.Load(),
		ld.ended.Sub(ld.began).Round(time.Millisecond), time.Duration(ld.maxLatency.Load()).Round(time.Microsecond),
		ld.slowAfter, ld.slow.Load(), time.Duration(ld.maxLate.Load()).Round(time.Microsecond))
	for r := leasequota.ReasonLeased; r <= leasequota.ReasonClosed; r++ {
		if y, n := ld.count(r, true), ld.count(r, false); y+n > 0 {
			fmt.Fprintf(&b, " %s %d/%d", r, y, n)
		}
	}
	b.WriteString(" (allowed/denied)")
	return b.String()
}

// checkLatency fails the test when a call outlived its ctx deadline by
// more than faultCallSlack and the most the load's own sleeps woke late
// (a busy machine's delay to run a woken goroutine: 230 ms calls beside
// 1 ms sleeps that woke about as late, with helpers' tests and -race on
// both cores).
func (ld *faultLoad) checkLatency(t *testing.T) {
	t.Helper()
	late := time.Duration(ld.maxLate.Load())
	if max := time.Duration(ld.maxLatency.Load()); max > ld.timeout+faultCallSlack+late {
		t.Errorf("slowest AllowN took %v, want < ctx timeout %v + %v + the most a sleep of the load woke late, %v", max, ld.timeout, faultCallSlack, late)
	}
}

// checkBound fails the test when a tenant's admissions from leases exceed
// its global bound Burst*(1+wipes) + Rate*elapsed: one extra burst per
// time Redis lost the tenant's bucket (restart, FLUSHALL), because a
// missing bucket is a full one.
func (ld *faultLoad) checkBound(t *testing.T, q func(tenant string) leasequota.Quota, wipes int) {
	t.Helper()
	elapsed := ld.ended.Sub(ld.began).Seconds()
	for i, name := range ld.tenants {
		quota := q(name)
		bound := float64(quota.Burst)*float64(1+wipes) + quota.Rate*elapsed
		got := ld.leased[i].Load()
		if float64(got) > bound {
			t.Errorf("%s: %d admitted from leases in %.3fs, above the bound %.0f = Burst %d x %d + Rate %.0f x elapsed",
				name, got, elapsed, bound, quota.Burst, 1+wipes, quota.Rate)
		}
		t.Logf("%s: %d admitted from leases, bound %.0f (%.0f%%); %d admitted by its failure mode",
			name, got, bound, 100*float64(got)/bound, ld.degradedAllowed[i].Load())
	}
}

// checkStats fails the test when the limiter's Stats disagree with the
// decisions the load saw: every degraded decision (and every other one
// made off the hot path) must be counted, and Leased must be the
// admissions from leases.
func (ld *faultLoad) checkStats(t *testing.T, st leasequota.Stats) {
	t.Helper()
	for _, r := range []leasequota.Reason{leasequota.ReasonFallback, leasequota.ReasonFailOpen, leasequota.ReasonUnavailable,
		leasequota.ReasonExhausted, leasequota.ReasonColdStart, leasequota.ReasonRefilled} {
		if got, want := st.Decisions[r].Allowed, ld.count(r, true); got != want {
			t.Errorf("Stats().Decisions[%s].Allowed = %d, the load saw %d", r, got, want)
		}
		if got, want := st.Decisions[r].Denied, ld.count(r, false); got != want {
			t.Errorf("Stats().Decisions[%s].Denied = %d, the load saw %d", r, got, want)
		}
	}
	// Leased counts the admissions decided on the hot path (ReasonLeased);
	// those after a wait are in Allowed[ReasonColdStart] and
	// Allowed[ReasonRefilled], checked above.
	if got, want := st.Decisions[leasequota.ReasonLeased].Allowed, ld.count(leasequota.ReasonLeased, true); got != want {
		t.Errorf("Stats().Decisions[leased].Allowed = %d, the load saw %d admissions with reason leased", got, want)
	}
	if got, want := st.Decisions[leasequota.ReasonLeased].Allowed+st.Decisions[leasequota.ReasonColdStart].Allowed+st.Decisions[leasequota.ReasonRefilled].Allowed, ld.leasedAll(); got != want {
		t.Errorf("Stats(): Leased + Allowed[cold_start] + Allowed[refilled] = %d, the load saw %d admissions from leases", got, want)
	}
}

// faultWait polls cond every millisecond until it holds or within passes.
func faultWait(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(time.Millisecond) // polling interval; the deadline bounds the wait
	}
	return time.Since(start)
}

// faultResumed waits until leasing has resumed for every tenant of the
// load: a grant after the call, then an admission from a lease after that
// grant was seen.
func faultResumed(t *testing.T, ld *faultLoad, within time.Duration) time.Duration {
	t.Helper()
	granted := ld.l.Stats().Granted
	var firstGrant int64
	return faultWait(t, within, "leasing resumes for every tenant", func() bool {
		if firstGrant == 0 {
			if ld.l.Stats().Granted <= granted {
				return false
			}
			firstGrant = time.Now().UnixNano()
		}
		for i := range ld.tenants {
			if ld.lastLeased[i].Load() <= firstGrant {
				return false
			}
		}
		return true
	})
}

// goroutinesBack polls until runtime.NumGoroutine is back to at most
// before.
func goroutinesBack(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			t.Logf("goroutines: %d before, %d after Close", before, n)
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d before, still %d 5s after Close:\n%s", before, n, buf)
		}
		time.Sleep(time.Millisecond) // polling interval; the deadline bounds the wait
	}
}

// failureQuotas are the quotas of the tenants in the outage tests: one
// per failure mode, plus a second FailLocal one.
func failureQuotas() (names []string, quota func(string) leasequota.Quota) {
	base := leasequota.Quota{Rate: 500, Burst: 50}
	quotas := map[string]leasequota.Quota{}
	for _, m := range []leasequota.FailureMode{leasequota.FailLocal, leasequota.FailClosed, leasequota.FailOpen, leasequota.FailDefault} {
		q := base
		q.FailureMode = m
		name := m.String()
		quotas[name] = q
		names = append(names, name)
	}
	return names, func(tenant string) leasequota.Quota { return quotas[tenant] }
}

// checkFailureModes fails the test when some tenant of failureQuotas was not
// decided by its failure mode while Redis was away.
func checkFailureModes(t *testing.T, ld *faultLoad, st leasequota.Stats) {
	t.Helper()
	if st.Decisions[leasequota.ReasonFailOpen].Allowed == 0 {
		t.Error("no FailOpen admission while Redis was away")
	}
	if st.Decisions[leasequota.ReasonUnavailable].Denied == 0 {
		t.Error("no FailClosed denial (unavailable) while Redis was away")
	}
	if st.Decisions[leasequota.ReasonFallback].Allowed == 0 {
		t.Error("no FailLocal admission (fallback) while Redis was away")
	}
	if st.Decisions[leasequota.ReasonUnavailable].Allowed != 0 {
		t.Errorf("%d admissions with reason unavailable", st.Decisions[leasequota.ReasonUnavailable].Allowed)
	}
}

// TestRedisKilledUnderLoad kills redis-server while 8 goroutines ask for
// four tenants (one per failure mode) at twice their rate, with a 100ms
// ctx per call and WithMaxWait(1s) so that requests do wait; then starts
// it again, empty, on the same port.
func TestRedisKilledUnderLoad(t *testing.T) {
	leakCheck(t) // its check runs after the server's cleanup
	srv := redistest.StartServer(t)
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	names, quota := failureQuotas()
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithQuotaFunc(quota), leasequota.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			l.Close(ctx)
		}
	}()
	ld := startFaultLoad(l, names, 2*500, 8, 100*time.Millisecond, 100*time.Millisecond)
	defer func() {
		select {
		case <-ld.stop:
		default:
			ld.stopLoad()
		}
	}()
	faultWait(t, 5*time.Second, "a lease for every tenant", func() bool {
		for i := range names {
			if ld.leased[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // load runs on Redis for a while (a bounded phase, not a wait for a condition)

	errs := l.Stats().Errors
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	took := faultWait(t, 5*time.Second, "Degraded() after the kill", l.Degraded)
	t.Logf("Degraded() %v after the kill", took.Round(time.Millisecond))
	// Redis stays down under load for 1 s, and for half a second at
	// least once the limiter is degraded, so that the failure modes
	// decide for a while: a silent Redis is taken for down a second
	// after the first call it left unanswered (docs/failure-modes.md),
	// and a restart at a second after the kill came as the failure modes
	// began, before FailLocal's fallback bucket, which starts empty, had
	// admitted anything (once, in a clean clone's make test).
	time.Sleep(max(time.Second-time.Since(killed), 500*time.Millisecond)) // a bounded phase, not a wait for a condition
	if got := l.Stats().Errors; got <= errs {
		t.Errorf("Stats().Errors = %d after %v without Redis, was %d", got, time.Since(killed).Round(time.Millisecond), errs)
	}

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	took = faultResumed(t, ld, 5*time.Second)
	t.Logf("leasing resumed %v after the restart", took.Round(time.Millisecond))
	faultWait(t, 5*time.Second, "Degraded() false after the restart", func() bool { return !l.Degraded() })
	time.Sleep(300 * time.Millisecond) // load on the restarted Redis
	ld.stopLoad()

	st := l.Stats()
	t.Log(ld.summary())
	t.Logf("stats: %+v", st)
	ld.checkLatency(t)
	ld.checkBound(t, quota, 1) // the restart emptied Redis: one extra burst
	ld.checkStats(t, st)
	checkFailureModes(t, ld, st)
	if st.Degraded {
		t.Error("Stats().Degraded after recovery")
	}

	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.Close(cctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	closed = true
	goroutinesBack(t, before)
}

// TestClientPauseKeepsLocalSpeed pauses every Redis client for 2s
// (CLIENT PAUSE 2000 ALL) under load. Four tenants hold leases that
// outlast the pause; a fifth, "small", has leases of a few tokens, so the
// syncer keeps calling Redis during the pause and those calls hang. No
// request may notice: none takes over 50ms, and the four keep being
// admitted from their leases.
//
// It runs with a default go-redis client, whose calls hang through the
// pause (the Redis timeout is not enforced, see
// TestRedisTimeoutWithDefaultClient), and with ContextTimeoutEnabled,
// whose calls time out and open the breaker.
func TestClientPauseKeepsLocalSpeed(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redis.Options
	}{
		{"default client", redis.Options{}},
		{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { testClientPause(t, tc.opts) })
	}
}

func testClientPause(t *testing.T, opts redis.Options) {
	leakCheck(t)
	srv := redistest.StartServer(t)
	opts.Addr, opts.Password = srv.Addr, srv.Password
	c := redis.NewClient(&opts)
	defer c.Close()
	admin := srv.Client()
	defer admin.Close()
	ctx := context.Background()

	// Each tenant is asked 200 times a second: 2.5s of requests is 500
	// tokens. MinLease 5,000 and a 30s lease lifetime hold through the
	// pause without a lease call.
	big := leasequota.Quota{Rate: 1000, Burst: 20000, MinLease: 5000, MaxLease: 10000, LeaseTTL: 30 * time.Second}
	small := leasequota.Quota{Rate: 100, Burst: 10}
	quota := func(tenant string) leasequota.Quota {
		if tenant == "small" {
			return small
		}
		return big
	}
	names := []string{"a", "b", "c", "d", "small"}
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithQuotaFunc(quota), leasequota.WithRedisTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	// The big tenants' first leases, polled for with a deadline: the
	// setup, not the subject. On a loaded machine the first lease call
	// to a server just started can run out of its 50 ms (beside two busy
	// loops and the other lane of make test on 2026-12-07 it did, and
	// the first request was denied as a cold start); the next one leases.
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range names[:4] {
		for {
			d := l.AllowN(ctx, n, 1)
			info, _ := l.Tenant(n)
			if d.Allowed && info.Tokens >= 1000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no lease of 1,000 tokens or more in 10 s: the last request %+v, holding %d tokens", n, d, info.Tokens)
			}
			time.Sleep(10 * time.Millisecond) // polling interval; the deadline bounds the wait
		}
	}

	ld := startFaultLoad(l, names, 200, 4, time.Second, 50*time.Millisecond)
	defer func() {
		select {
		case <-ld.stop:
		default:
			ld.stopLoad()
		}
	}()
	time.Sleep(250 * time.Millisecond) // load before the pause
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	calls, st0 := ld.calls.Load(), l.Stats()
	time.Sleep(2 * time.Second) // the pause, under load
	during, st1 := ld.calls.Load()-calls, l.Stats()
	degraded := l.Degraded()
	time.Sleep(250 * time.Millisecond) // load after the pause
	ld.stopLoad()
	t.Log(ld.summary())
	t.Logf("%d requests during the %v pause; lease calls started during it: %d, failed: %d; Degraded() at its end: %v",
		during, time.Since(paused).Round(time.Millisecond), st1.Calls-st0.Calls, st1.Errors-st0.Errors, degraded)

	if n := ld.slow.Load(); n != 0 {
		t.Errorf("%d AllowN calls took over 50ms (slowest %v) while Redis was paused",
			n, time.Duration(ld.maxLatency.Load()))
	}
	if during < 1500 {
		t.Errorf("only %d requests during the 2s pause, want >= 1500 (1,000/s offered)", during)
	}
	// With ContextTimeoutEnabled the syncer's calls time out and it keeps
	// making lease calls for the small tenant during the pause. With the
	// default client its loop waits on its first Redis command of the
	// pause (a lease call, or the poll of the quota version) until the
	// pause ends: that is the documented cost of not enabling it.
	if opts.ContextTimeoutEnabled && st1.Calls == st0.Calls {
		t.Error("the syncer started no lease call during the pause: the test did not make it wait on Redis")
	}
	if opts.ContextTimeoutEnabled && (st1.Errors == st0.Errors || !degraded) {
		t.Errorf("with ContextTimeoutEnabled: %d lease calls failed during the pause, Degraded()=%v at its end; want failures and the breaker open",
			st1.Errors-st0.Errors, degraded)
	}
	for i, n := range names[:4] {
		if got, want := ld.leased[i].Load(), ld.calls.Load()/int64(len(names)); got < want-1 {
			t.Errorf("%s: %d of about %d requests admitted from its lease, want all", n, got, want)
		}
	}
}

// proxiedLimiter returns a limiter whose Redis traffic goes through a
// fault proxy, with a 50ms Redis timeout and a 100ms refresh interval.
func proxiedLimiter(t *testing.T, srv *redistest.Server, opts redis.Options, quota func(string) leasequota.Quota) (*leasequota.Limiter, *faultProxy, *redis.Client) {
	t.Helper()
	p := startFaultProxy(t, srv.Addr)
	opts.Addr, opts.Password = p.Addr(), srv.Password
	c := redis.NewClient(&opts)
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithQuotaFunc(quota), leasequota.WithRedisTimeout(50*time.Millisecond), leasequota.WithRefreshInterval(100*time.Millisecond),
		leasequota.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l, p, c
}

// TestRedisSlowAndBlackholed puts a fault proxy between the limiter and
// Redis, under load: first 300ms of added latency each way (six times the
// 50ms Redis timeout), then a blackhole that accepts connections and never
// answers. In both the breaker must open, errors be counted, requests keep
// their ctx deadline and leases their bound, and leasing resume after.
//
// The client has ContextTimeoutEnabled: without it go-redis ignores the
// ctx deadline on socket reads, and WithRedisTimeout bounds nothing (see
// TestRedisTimeoutWithDefaultClient).
func TestRedisSlowAndBlackholed(t *testing.T) {
	leakCheck(t)
	srv := redistest.StartServer(t)
	before := runtime.NumGoroutine()
	ctx := context.Background()

	names, quota := failureQuotas()
	l, p, c := proxiedLimiter(t, srv, redis.Options{ContextTimeoutEnabled: true}, quota)
	ld := startFaultLoad(l, names, 2*500, 8, 100*time.Millisecond, 100*time.Millisecond)
	stopped := false
	defer func() {
		if !stopped {
			ld.stopLoad()
			l.Close(ctx)
			c.Close()
		}
	}()
	faultWait(t, 5*time.Second, "a lease for every tenant", func() bool {
		for i := range names {
			if ld.leased[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // load through the proxy, no fault

	for _, fault := range []struct {
		name string
		set  func(on bool)
	}{
		{"300ms latency", func(on bool) {
			if on {
				p.SetLatency(300 * time.Millisecond)
			} else {
				p.SetLatency(0)
			}
		}},
		{"blackhole", p.SetBlackhole},
	} {
		errs := l.Stats().Errors
		fault.set(true)
		began := time.Now()
		took := faultWait(t, 5*time.Second, fault.name+": Degraded()", l.Degraded)
		t.Logf("%s: Degraded() after %v", fault.name, took.Round(time.Millisecond))
		time.Sleep(time.Second - time.Since(began)) // the fault lasts 1s under load
		if got := l.Stats().Errors; got <= errs {
			t.Errorf("%s: Stats().Errors = %d, was %d before", fault.name, got, errs)
		} else {
			t.Logf("%s: Stats().Errors grew by %d in 1s", fault.name, got-errs)
		}
		fault.set(false)
		took = faultResumed(t, ld, 5*time.Second)
		t.Logf("%s: leasing resumed %v after the fault ended", fault.name, took.Round(time.Millisecond))
		faultWait(t, 5*time.Second, fault.name+": Degraded() false after the fault", func() bool { return !l.Degraded() })
	}
	time.Sleep(300 * time.Millisecond) // load after the faults
	ld.stopLoad()
	stopped = true

	st := l.Stats()
	t.Log(ld.summary())
	t.Logf("stats: %+v; proxy: %d connections accepted, %d bytes swallowed", st, p.accepted.Load(), p.dropped.Load())
	ld.checkLatency(t)
	ld.checkBound(t, quota, 0) // Redis kept its data
	ld.checkStats(t, st)
	checkFailureModes(t, ld, st)

	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.Close(cctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	c.Close()
	p.Close()
	goroutinesBack(t, before)
}

// TestCloseOnABlackholedRedis: Close on a Redis that accepts connections
// and answers nothing returns, with no goroutine left, within what its doc
// allows: the lease calls' deadlines, and a read of the quota version and
// a count of the roster in flight, each bounded by min(lease TTL, 1 s)
// (go-redis ends a read at its deadline, not when its context is
// canceled).
func TestCloseOnABlackholedRedis(t *testing.T) {
	leakCheck(t)
	srv := redistest.StartServer(t)
	ctx := context.Background()
	names, quota := failureQuotas()
	l, p, c := proxiedLimiter(t, srv, redis.Options{ContextTimeoutEnabled: true}, quota)
	defer p.Close()
	defer c.Close()
	for _, name := range names {
		l.AllowN(ctx, name, 1)
	}
	p.SetBlackhole(true)
	// Requests of new tenants for half a second: their first lease calls
	// and the polls of the quota version meet the blackhole.
	for i, until := 0, time.Now().Add(500*time.Millisecond); time.Now().Before(until); i++ {
		l.AllowN(ctx, fmt.Sprintf("cold-%d", i), 1)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	l.Close(cctx) // its returns fail: Redis answers nothing
	took := time.Since(began)
	if l.Allow(names[0]) {
		t.Errorf("Allow after Close admitted")
	}
	t.Logf("Close took %v", took)
	// Two reads' deadlines, the calls', and a second for a loaded machine.
	if most := 2*time.Second + 500*time.Millisecond + time.Second; took > most {
		t.Errorf("Close on a blackholed Redis took %v, more than %v", took, most)
	}
}

// TestRedisAnsweringLateIsBusyForAWhile puts 30 ms of latency each way
// between a limiter and Redis, more than its 20 ms Redis timeout and less
// than half its 400 ms lease TTL (the deadline of its read of the quota
// version). Every lease call times out, but the read is answered: Redis
// is busy, not down, for 4 lease TTLs since its last answer in time, and
// only then does the breaker open (before, it opened once no call had
// been answered in time for one lease TTL). A process too short of CPU
// to read its replies in time looks the same to the limiter.
func TestRedisAnsweringLateIsBusyForAWhile(t *testing.T) {
	leakCheck(t)
	srv := redistest.Shared(t)
	const ttl = 400 * time.Millisecond
	p := startFaultProxy(t, srv.Addr)
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), Password: srv.Password, ContextTimeoutEnabled: true})
	defer c.Close()
	warns := &warnRecorder{Handler: redistest.Logger(t).Handler(), msgs: new([]string), mu: new(sync.Mutex)}
	l, err := leasequota.New(c, leasequota.WithLogger(slog.New(warns)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 200, Burst: 20, FailureMode: leasequota.FailClosed}),
		leasequota.WithRedisTimeout(20*time.Millisecond), leasequota.WithRefreshInterval(100*time.Millisecond), leasequota.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer l.Close(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a tenant's requests, so that its lease calls go on
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C: // pacing the load, not waiting for a condition
				l.Allow("late")
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	faultWait(t, 5*time.Second, "a lease", func() bool { return l.Stats().Granted > 0 })

	errs := l.Stats().Errors
	p.SetLatency(30 * time.Millisecond)
	took := faultWait(t, 4*ttl+5*time.Second, "Degraded() under the latency", l.Degraded)
	t.Logf("Degraded() %v after the latency began; %d lease calls failed", took.Round(time.Millisecond), l.Stats().Errors-errs)
	if took < 2*ttl {
		t.Errorf("Degraded() %v after the latency began, want no sooner than %v: Redis answered the reads", took, 2*ttl)
	}
	if l.Stats().Errors == errs {
		t.Error("no lease call failed under the latency: the test shows nothing")
	}
	// The warning says Redis answers late, not that it is unreachable.
	if got := warns.all(); len(got) == 0 || !strings.Contains(got[len(got)-1], "Redis answers, but only after WithRedisTimeout's deadline") {
		t.Errorf("warnings %q, want the last to say that Redis answers late", got)
	}
	p.SetLatency(0)
	faultWait(t, 5*time.Second, "Degraded() false after the latency", func() bool { return !l.Degraded() })
}

// warnRecorder is a slog.Handler that records the messages of the records
// at Warn and above, and hands every record on to Handler.
type warnRecorder struct {
	slog.Handler
	mu   *sync.Mutex // guards msgs, shared by the handlers WithAttrs and WithGroup make
	msgs *[]string
}

func (w *warnRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		*w.msgs = append(*w.msgs, r.Message)
		w.mu.Unlock()
	}
	return w.Handler.Handle(ctx, r)
}

func (w *warnRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &warnRecorder{Handler: w.Handler.WithAttrs(attrs), mu: w.mu, msgs: w.msgs}
}

func (w *warnRecorder) WithGroup(name string) slog.Handler {
	return &warnRecorder{Handler: w.Handler.WithGroup(name), mu: w.mu, msgs: w.msgs}
}

// all returns the messages recorded so far.
func (w *warnRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), *w.msgs...)
}

// TestRedisTimeoutWithDefaultClient checks what the library promises for
// a go-redis client made without ContextTimeoutEnabled (what most code
// has): go-redis then ignores ctx deadlines on socket reads, so
// WithRedisTimeout cannot bound a call to a blackholed Redis (it waits
// for the client's own ReadTimeout). New says so once, at Warn, naming
// the option to set; with the option set, TestRedisSlowAndBlackholed shows
// the timeout enforced. docs/failure-modes.md documents both.
func TestRedisTimeoutWithDefaultClient(t *testing.T) {
	redistest.Shared(t)
	var logs redistest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	for _, tc := range []struct {
		opts redis.Options
		warn bool
	}{
		{redis.Options{}, true},
		{redis.Options{ContextTimeoutEnabled: true}, false},
	} {
		tc.opts.Addr = redistest.Shared(t).Addr
		c := redis.NewClient(&tc.opts)
		before := strings.Count(logs.String(), "ContextTimeoutEnabled")
		l, err := leasequota.New(c, leasequota.WithKeyPrefix(redistest.Prefix(t)), leasequota.WithLogger(logger),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
		if err != nil {
			t.Fatal(err)
		}
		warned := strings.Count(logs.String(), "ContextTimeoutEnabled") > before
		if warned != tc.warn {
			t.Errorf("ContextTimeoutEnabled=%v: warned=%v, want %v; log:\n%s", tc.opts.ContextTimeoutEnabled, warned, tc.warn, logs.String())
		}
		l.Close(context.Background())
		c.Close()
	}
}

// startWipeLoad starts what the tests that wipe Redis' state share: a
// dedicated server, a limiter on it with the failure quotas and a 1s
// MaxWait, its load, and a second client to wipe with; everything is
// closed, and goroutine leaks checked, when the test ends.
func startWipeLoad(t *testing.T) (l *leasequota.Limiter, admin *redis.Client, ld *faultLoad, quota func(string) leasequota.Quota, redisErrors func() map[string]int64) {
	t.Helper()
	leakCheck(t)
	srv := redistest.StartServer(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	admin = srv.Client()
	t.Cleanup(func() { admin.Close() })
	names, quota := failureQuotas()
	reader := sdkmetric.NewManualReader()
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithQuotaFunc(quota), leasequota.WithMaxWait(time.Second),
		leasequota.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l, admin, startFaultLoad(l, names, 2*500, 8, 100*time.Millisecond, 100*time.Millisecond), quota,
		func() map[string]int64 { return redisErrorsByType(t, reader) }
}

// redisErrorsByType returns the failed Redis calls the limiter whose
// meter provider reads into reader has counted (leasequota.redis.errors),
// by error.type. It fails the test when the reader saw no Redis call
// timed (leasequota.redis.duration): then it would see no error either.
func redisErrorsByType(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	byType := map[string]int64{}
	var calls uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "leasequota.redis.duration" {
				for _, dp := range h.DataPoints {
					calls += dp.Count
				}
			}
			if m.Name != "leasequota.redis.errors" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("leasequota.redis.errors is a %T, want a Sum[int64]", m.Data)
			}
			for _, dp := range sum.DataPoints {
				kind, _ := dp.Attributes.Value("error.type")
				byType[kind.AsString()] += dp.Value
			}
		}
	}
	if calls == 0 {
		t.Fatal("the meter provider's reader saw no Redis call (leasequota.redis.duration)")
	}
	return byType
}

// checkWipeErrors fails the test for any failed Redis call but one that
// timed out: a wipe (SCRIPT FLUSH, FLUSHALL) must be invisible, so a
// NOSCRIPT that was not retried, or a script error, is a bug; a call that
// ran out of its deadline (WithRedisTimeout, 50 ms) says the machine was
// busy (this test's 8 goroutines, and whatever else it runs), which the
// wipe does not cause. Each is logged.
func checkWipeErrors(t *testing.T, byType map[string]int64, st leasequota.Stats) {
	t.Helper()
	t.Logf("failed Redis calls by error.type: %v (Stats().Errors %d)", byType, st.Errors)
	for kind, n := range byType {
		if kind != "timeout" && n > 0 {
			t.Errorf("%d Redis calls failed with error.type %s, want none", n, kind)
		}
	}
}

// checkNoDegraded fails the test if any decision was made by a failure
// mode (fallback, unavailable, fail open).
func (ld *faultLoad) checkNoDegraded(t *testing.T) {
	t.Helper()
	for _, r := range []leasequota.Reason{leasequota.ReasonFallback, leasequota.ReasonUnavailable, leasequota.ReasonFailOpen} {
		if n := ld.count(r, true) + ld.count(r, false); n != 0 {
			t.Errorf("%d decisions with reason %s, want 0", n, r)
		}
	}
}

// TestScriptFlushUnderLoad flushes Redis' script cache every 50ms under
// load: the NOSCRIPT fallback must hide it completely (no failed call but
// one that timed out on a busy machine: checkWipeErrors; no degraded
// decision), and the bound holds with no extra burst.
func TestScriptFlushUnderLoad(t *testing.T) {
	l, admin, ld, quota, redisErrors := startWipeLoad(t)
	ctx := context.Background()
	flushes := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); flushes++ {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the fault's period
	}
	ld.stopLoad()

	st := l.Stats()
	noscript := redisErrorStat(t, admin, "NOSCRIPT")
	t.Log(ld.summary())
	t.Logf("%d SCRIPT FLUSH, %d NOSCRIPT replies; stats %+v", flushes, noscript, st)
	if noscript == 0 {
		t.Error("Redis answered NOSCRIPT 0 times: the test did not exercise the fallback")
	}
	checkWipeErrors(t, redisErrors(), st) // NOSCRIPT must be retried with EVAL
	ld.checkNoDegraded(t)
	ld.checkLatency(t)
	ld.checkBound(t, quota, 0)
	ld.checkStats(t, st)
}

// TestFlushAllUnderLoad wipes Redis (FLUSHALL) once under load: buckets
// come back full, so each tenant may get one extra burst, and nothing
// else changes (no failed call but one that timed out on a busy machine:
// checkWipeErrors; no degraded decision).
func TestFlushAllUnderLoad(t *testing.T) {
	l, admin, ld, quota, redisErrors := startWipeLoad(t)
	ctx := context.Background()
	time.Sleep(time.Second) // load before the wipe
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // load after the wipe
	ld.stopLoad()

	st := l.Stats()
	t.Log(ld.summary())
	t.Logf("stats %+v", st)
	checkWipeErrors(t, redisErrors(), st)
	ld.checkNoDegraded(t)
	ld.checkLatency(t)
	ld.checkBound(t, quota, 1) // the wipe: one extra burst
	ld.checkStats(t, st)
}

// redisErrorStat returns how many error replies with the given prefix Redis
// sent (INFO errorstats).
func redisErrorStat(t *testing.T, c *redis.Client, prefix string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		// errorstat_NOSCRIPT:count=3
		if v, ok := strings.CutPrefix(line, "errorstat_"+prefix+":count="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// TestStartOnPausedRedisIsNotAnOutage: a limiter started while Redis
// accepts connections but runs no command (CLIENT PAUSE ALL, as a Redis
// flooded by a fleet's first calls does for a while) sees its lease calls
// time out before any call of its own was answered. That is a busy Redis,
// not a down one: its first read of the quota version is still out
// (Syncer.busy, quotaPoll.firstPending), so no request is decided by the
// failure mode, and once the pause ends the tenant leases. It is
// TestLateAnswersAreBusyForAWhile's "slow first" case on a real Redis;
// with the first read's rule taken out, 226 and 266 requests (two runs)
// were denied as unavailable and Degraded() turned true.
func TestStartOnPausedRedisIsNotAnOutage(t *testing.T) {
	leakCheck(t)
	srv := redistest.StartServer(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := context.Background()
	const pause = 400 * time.Millisecond
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: srv.Password, ContextTimeoutEnabled: true})
	defer c.Close()
	startOnFault(t, c, "paused", paused, pause)
}

// TestSlowDialsAtStartAreNotAnOutage: a limiter whose connections take
// longer to set up than its call deadline, for a while after it starts
// (a fleet's connection storm overflowing Redis's accept queue, or TLS
// handshakes on a busy Redis), sees its lease calls time out with no
// connection in its go-redis pool, its first read of the quota version
// still dialing. Redis accepts connections, so that is congestion, not an
// outage: no request is decided by the failure mode, Degraded() stays
// false, and the tenant leases once the dials are quick again. Before,
// an empty pool was taken for a Redis that refuses connections: the
// timeouts opened the breaker and requests were denied as unavailable.
func TestSlowDialsAtStartAreNotAnOutage(t *testing.T) {
	leakCheck(t)
	srv := redistest.Shared(t)
	const slow = 300 * time.Millisecond
	began := time.Now()
	var d net.Dialer
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: srv.Password, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// Until slow after the start, a dial takes until then.
			if wait := slow - time.Since(began); wait > 0 {
				timer := time.NewTimer(wait)
				defer timer.Stop()
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-timer.C:
				}
			}
			return d.DialContext(ctx, network, addr)
		}})
	defer c.Close()
	startOnFault(t, c, "slow-dials", began, slow)
}

// startOnFault starts a limiter on c (a 50 ms call deadline, fail
// closed) during a fault of Redis that began at from and lasts fault,
// sends a request for tenant every 2 ms until the fault has ended and the
// tenant holds a lease, and checks that a lease call failed meanwhile
// (or the test shows nothing), and that no request was decided by the
// failure mode, nor Degraded() true: Redis was up throughout.
func startOnFault(t *testing.T, c *redis.Client, tenant string, from time.Time, fault time.Duration) {
	t.Helper()
	ctx := context.Background()
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 200, Burst: 20, FailureMode: leasequota.FailClosed}),
		leasequota.WithRedisTimeout(50*time.Millisecond), leasequota.WithRefreshInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	reasons := map[leasequota.Reason]int{}
	degraded := false
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := from.Add(fault + 5*time.Second)
	for l.Stats().Granted == 0 || time.Since(from) < fault {
		if time.Now().After(deadline) {
			t.Fatalf("no lease %v after the fault began; decisions %v", time.Since(from), reasons)
		}
		<-tick.C // pacing the requests, not waiting for a condition
		reasons[l.AllowN(ctx, tenant, 1).Reason]++
		degraded = degraded || l.Degraded()
	}
	t.Logf("leased %v after the fault began; %d lease calls failed; decisions %v", time.Since(from).Round(time.Millisecond), l.Stats().Errors, reasons)
	if l.Stats().Errors == 0 {
		t.Error("no lease call failed during the fault: the test shows nothing")
	}
	if n := reasons[leasequota.ReasonUnavailable] + reasons[leasequota.ReasonFallback] + reasons[leasequota.ReasonFailOpen]; n > 0 || degraded {
		t.Errorf("%d decisions by the failure mode, Degraded() %v, while Redis was up: decisions %v", n, degraded, reasons)
	}
}
