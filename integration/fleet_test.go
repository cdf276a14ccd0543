package integration

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// The fleet shapes of issue #15: N instances share T tenants of Rate 100
// and Burst 100 each; every tenant is offered 3x its quota, spread evenly
// over the instances. TestFleet runs the smallest shape briefly and checks
// the bound and utilization; BenchmarkFleet (fleet_bench_test.go) runs
// them all and measures Redis's work against redis_rate's.

const (
	fleetRate  = 100
	fleetBurst = 100
	fleetOver  = 3.0 // issue #15's offered load over quota, per tenant
	// fleetTick is how often a load goroutine issues what is due.
	fleetTick = 5 * time.Millisecond
)

// fleetShape is instances x tenants, each tenant offered over times its
// Rate.
type fleetShape struct {
	instances, tenants int
	over               float64
}

func (s fleetShape) String() string { return fmt.Sprintf("%dx%d", s.instances, s.tenants) }

// offeredRate is the load the shape offers, in requests per second.
func (s fleetShape) offeredRate() float64 { return s.over * fleetRate * float64(s.tenants) }

// fleetQuota is every tenant's quota.
var fleetQuota = leasequota.Quota{Rate: fleetRate, Burst: fleetBurst}

// fleetTenants names the shape's tenants.
func fleetTenants(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	return names
}

// fleetLoad is what one run of the load offered and got, per tenant.
type fleetLoad struct {
	offered, admitted []int64
	// failed counts the decisions made by a failure mode (leasequota) or
	// that failed with an error (redis_rate).
	failed int64
	wall   time.Duration // from the start of the load to its end
}

func (l *fleetLoad) totals() (offered, admitted int64) {
	for i := range l.offered {
		offered += l.offered[i]
		admitted += l.admitted[i]
	}
	return offered, admitted
}

// deliveredRate is the load the machine actually offered, in requests per
// second: the goroutines fall behind their schedule when the machine (or
// a decision's wait) is slow.
func (l *fleetLoad) deliveredRate() float64 {
	offered, _ := l.totals()
	return float64(offered) / l.wall.Seconds()
}

// fleetDecider decides one request of tenant on instance inst: whether it
// was admitted, and whether a failure mode (or an error) decided it.
type fleetDecider func(ctx context.Context, inst, tenant int) (allowed, failed bool)

// The states of a pair's first decisions in driveFleet.
const (
	pairFirst   = iota // no request sent yet
	pairPending        // its first request is being decided in a goroutine of its own
	pairWarm           // its first decision returned: decided in the load goroutine
)

// driveFleet offers the shape's load to decide for d: *fleetGoroutines per
// instance, each serving every *fleetGoroutines-th tenant at
// s.over*Rate/instances requests per second, paced by a schedule (the
// k-th request of a pair is due at (k-phase)/rate). Decisions are
// synchronous: a goroutine behind its schedule catches up as fast as the
// decisions return, which is the most the machine can offer.
//
// A tenant's first request on an instance waits for its first lease
// (WithColdStartWait), so decided in the load goroutine it holds up that
// goroutine's other tenants, which a service's concurrent requests do
// not. With -fleet.coldasync, a pair's first request is decided in a
// goroutine of its own, as the fleet simulation's driver does
// (sim_fleet_test.go), and the pair's later requests are not made until
// it returns: a client waiting for its first answer. Every pair then
// starts at once (docs/performance.md, "Every pair at once").
func driveFleet(ctx context.Context, s fleetShape, d time.Duration, decide fleetDecider) fleetLoad {
	perPair := s.over * fleetRate / float64(s.instances)
	type counts struct {
		tenants           []int
		offered, admitted []int64
		// failed is added to by the load goroutine and, with
		// -fleet.coldasync, by its pairs' first decisions.
		failed atomic.Int64
		// first is, with -fleet.coldasync (nil without), where each
		// pair's first decision is: pairFirst, then pairPending while a
		// goroutine of its own makes it, then pairWarm. That goroutine
		// adds to the pair's admitted before it stores pairWarm, and the
		// load goroutine touches it only once it loads pairWarm.
		first []atomic.Int32
	}
	var late sync.WaitGroup // the pairs' first decisions (-fleet.coldasync)
	goroutines := max(*fleetGoroutines, 1)
	all := make([]*counts, 0, s.instances*goroutines)
	for inst := 0; inst < s.instances; inst++ {
		for g := 0; g < goroutines; g++ {
			c := &counts{}
			for t := g; t < s.tenants; t += goroutines {
				c.tenants = append(c.tenants, t)
			}
			if *fleetRotate {
				from := inst * len(c.tenants) / s.instances
				c.tenants = slices.Concat(c.tenants[from:], c.tenants[:from])
			}
			c.offered, c.admitted = make([]int64, len(c.tenants)), make([]int64, len(c.tenants))
			if *fleetColdAsync {
				c.first = make([]atomic.Int32, len(c.tenants))
			}
			all = append(all, c)
		}
	}
	var wg sync.WaitGroup
	began := time.Now()
	for k, c := range all {
		inst := k / goroutines
		phase := float64(k) / float64(len(all)) // spreads the goroutines' requests over a period
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(fleetTick)
			defer tick.Stop()
			var sent int64 // per pair of this goroutine: all its pairs share the schedule
			for {
				el := time.Since(began)
				if el >= d || ctx.Err() != nil {
					return
				}
				due := int64(el.Seconds()*perPair + phase)
				for ; sent < due; sent++ {
					for j, t := range c.tenants {
						if c.first != nil {
							switch c.first[j].Load() {
							case pairPending:
								continue // not made: the pair waits for its first answer
							case pairFirst:
								c.first[j].Store(pairPending)
								c.offered[j]++
								late.Add(1)
								go func() {
									defer late.Done()
									allowed, failed := decide(ctx, inst, t)
									if allowed {
										c.admitted[j]++
									}
									if failed {
										c.failed.Add(1)
									}
									c.first[j].Store(pairWarm)
								}()
								continue
							}
						}
						c.offered[j]++
						allowed, failed := decide(ctx, inst, t)
						if allowed {
							c.admitted[j]++
						}
						if failed {
							c.failed.Add(1)
						}
					}
					if time.Since(began) >= d {
						return
					}
				}
				<-tick.C // pacing the load, not waiting for a condition
			}
		}()
	}
	wg.Wait()
	wall := time.Since(began)
	late.Wait() // first decisions still under way (-fleet.coldasync)
	l := fleetLoad{offered: make([]int64, s.tenants), admitted: make([]int64, s.tenants), wall: wall}
	for _, c := range all {
		for j, t := range c.tenants {
			l.offered[t] += c.offered[j]
			l.admitted[t] += c.admitted[j]
		}
		l.failed += c.failed.Load()
	}
	return l
}

// fleetResult is one leasequota run of a shape.
type fleetResult struct {
	load fleetLoad
	// elapsed is on the Redis clock, from before the first decision to
	// after the last: every bucket was created in it.
	elapsed time.Duration
	// Redis's work during the load (INFO cpu and commandstats deltas).
	redisCPU time.Duration
	evalsha  int64
	// exists counts the EXISTS commands run inside the scripts: one per
	// tenant an acquire or release served (its override's), whether the
	// script call served one tenant or a batch.
	exists int64
	stats  leasequota.Stats // summed over the limiters, when the load ended
	// heldRead is how long after the load ended the read of held ended.
	heldRead time.Duration
	// overBound lists the tenants that admitted more than
	// Burst + Rate*elapsed.
	overBound []string
	closeErrs int // limiters whose Close failed to return every lease
	// held is the leased tokens the limiters held unspent when the load
	// ended: debited from the buckets, never admitted.
	held int64
	// left is the tokens still in the global buckets when the load ended
	// (read with want-0 acquires after held and after Redis's counters,
	// which it would add to): refill no lease took.
	left float64
	// steady is the part of the run after its warm-up (runFleet's
	// warmup; zero without one).
	steady fleetSteady
	// sharesInForce counts the tenants whose buckets had rate shares in
	// force when the load ended, sharesAfterClose once every limiter had
	// closed (sharesRecorded).
	sharesInForce, sharesAfterClose int
}

// sharesRecorded counts the tenants of names whose buckets record rate
// shares (field sh) in force at Redis's time now: a record moves on
// only when a script writes the bucket, so one whose shares have all
// ended by their epochs stays until then.
func sharesRecorded(ctx context.Context, c *redis.Client, prefix string, names []string) (n int) {
	now, err := c.Time(ctx).Result()
	if err != nil {
		return 0
	}
	pipe := c.Pipeline()
	fields := make([]*redis.SliceCmd, len(names))
	for i, name := range names {
		fields[i] = pipe.HMGet(ctx, lease.Key(prefix, name), "ts", "sh")
	}
	pipe.Exec(ctx)
	for _, f := range fields {
		v, err := f.Result()
		if err != nil || len(v) != 2 {
			continue
		}
		ts, _ := v[0].(string)
		sh, _ := v[1].(string)
		at, err1 := strconv.ParseInt(ts, 10, 64)
		s, err2 := lease.ParseShares(sh)
		if sh == "" || err1 != nil || err2 != nil {
			continue
		}
		if _, s = lease.RefillShares(0, at, now.UnixMicro(), fleetRate, fleetBurst, s); s.InForce() {
			n++
		}
	}
	return n
}

// fleetSteady is what a fleet run measured after its warm-up: Redis's
// work (INFO cpu and commandstats deltas) and the requests admitted, over
// the wall time from the warm-up's end to the load's.
type fleetSteady struct {
	redisCPU        time.Duration
	evalsha, exists int64
	admitted        int64
	wall            time.Duration
	// worst is the least a tenant admitted over its rate for wall.
	worst float64
	// commands is INFO commandstats' time by command (µs), for where
	// Redis's CPU went.
	commands map[string]int64
}

// commandTimes returns INFO commandstats' usec by command.
func commandTimes(tb testing.TB, c *redis.Client) map[string]int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("INFO commandstats %q: %v", line, err)
				}
				out[name] = n
			}
		}
	}
	return out
}

// bound is a tenant's most admissions in the run.
func (r *fleetResult) bound() float64 { return fleetBurst + fleetRate*r.elapsed.Seconds() }

// utilization is admitted / Σ(Burst + Rate*elapsed) over the tenants.
func (r *fleetResult) utilization() float64 {
	_, admitted := r.load.totals()
	return float64(admitted) / (r.bound() * float64(len(r.load.admitted)))
}

// worstTenant is the least admitted / (Burst + Rate*elapsed) of a
// tenant: a fleet that serves some tenants and starves others shows here,
// not in utilization.
func (r *fleetResult) worstTenant() float64 {
	if len(r.load.admitted) == 0 {
		return 0
	}
	return float64(slices.Min(r.load.admitted)) / r.bound()
}

// byTenth is the utilization of each tenth of the tenants, in the order
// in which each load goroutine asks for them (by index): a tenant's first
// lease call comes late when the instances serve the tenants' first
// requests one after another, and its bucket spills its refill until
// then.
func (r *fleetResult) byTenth() (u [10]float64) {
	n := len(r.load.admitted)
	for i := range u {
		from, to := i*n/10, (i+1)*n/10
		if to == from {
			continue
		}
		var a int64
		for _, x := range r.load.admitted[from:to] {
			a += x
		}
		u[i] = float64(a) / (r.bound() * float64(to-from))
	}
	return u
}

// deliveredUtilization is admitted over what the load could have had:
// per tenant the lesser of its bound and what was offered.
func (r *fleetResult) deliveredUtilization() float64 {
	var could float64
	for _, o := range r.load.offered {
		could += min(r.bound(), float64(o))
	}
	_, admitted := r.load.totals()
	return float64(admitted) / could
}

// runFleet runs the shape's load for d through s.instances Limiters on
// srv, each with its own client, and returns what Redis did and what the
// tenants got. The limiters are FailClosed: every admission is paid for
// with leased tokens, so the bound covers all of them, and a decision of
// the failure mode is a denial (ReasonUnavailable), counted apart. opts
// are added to every limiter's options.
func runFleet(tb testing.TB, srv *redistest.Server, s fleetShape, d time.Duration, logger *slog.Logger, tally *scriptTally, opts ...leasequota.Option) fleetResult {
	tb.Helper()
	ctx := context.Background()
	admin := srv.Client()
	defer admin.Close()
	prefix := redistest.Prefix(tb)
	names := fleetTenants(s.tenants)
	lims := make([]*leasequota.Limiter, s.instances)
	for i := range lims {
		c := srv.Client()
		defer c.Close()
		if tally != nil {
			c.AddHook(tally)
		}
		l, err := leasequota.New(c, append([]leasequota.Option{leasequota.WithKeyPrefix(prefix), leasequota.WithDefaultQuota(fleetQuota),
			leasequota.WithFailureMode(leasequota.FailClosed), leasequota.WithLogger(logger.With("limiter", i))}, opts...)...)
		if err != nil {
			tb.Fatal(err)
		}
		lims[i] = l
	}
	// Close returns the unspent leased tokens. On a saturated Redis some
	// returns time out: those tokens are forfeited (the bound still
	// holds), so a failed Close is counted, not a failure of the test.
	var closeErrs int
	var firstCloseErr string
	closed := false
	closeAll := func() {
		if closed {
			return
		}
		closed = true
		for _, l := range lims {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := l.Close(cctx); err != nil {
				if closeErrs == 0 {
					firstCloseErr, _, _ = strings.Cut(err.Error(), "\n")
				}
				closeErrs++
			}
			cancel()
		}
	}
	defer closeAll()

	cpu0, calls0, exists0 := redisCPU(tb, admin), commandCalls(tb, admin, "evalsha"), commandCalls(tb, admin, "exists")
	start := redisTime(tb, admin)
	if tally != nil {
		tally.start.Store(time.Now().UnixNano())
	}
	// The steady state: Redis's counters and the admissions at the end of
	// the warm-up, taken by a timer of the run's schedule.
	var admitted atomic.Int64
	perTenant := make([]atomic.Int64, len(names)) // admitted, for the steady state's worst tenant
	loaded := make(chan fleetLoad, 1)
	go func() {
		loaded <- driveFleet(ctx, s, d, func(ctx context.Context, inst, t int) (bool, bool) {
			dec := lims[inst].AllowN(ctx, names[t], 1)
			if dec.Allowed {
				admitted.Add(1)
				perTenant[t].Add(1)
			}
			return dec.Allowed, dec.Mode != leasequota.FailDefault || dec.Reason == leasequota.ReasonUnavailable
		})
	}()
	var tl *timeline
	if *fleetTimeline > 0 {
		tl = startTimeline(*fleetTimeline, admin, lims, &admitted)
	}
	var warm fleetSteady
	var warmAt time.Time
	var warmTenants []int64
	if w := *fleetWarmup; w > 0 && w < d {
		time.Sleep(w) // the run's schedule: the warm-up's end, not a wait for a condition
		// The admissions first, at warmAt: read after Redis's counters they
		// left out of the steady state what was admitted while the four
		// INFO calls waited (behind queued pipelines on a saturated
		// Redis), whose time wall counts. The CPU then lags warmAt by one
		// INFO call.
		warmAt = time.Now()
		warm.admitted = admitted.Load()
		for i := range perTenant {
			warmTenants = append(warmTenants, perTenant[i].Load())
		}
		warm.redisCPU = redisCPU(tb, admin)
		warm.evalsha, warm.exists = commandCalls(tb, admin, "evalsha"), commandCalls(tb, admin, "exists")
		warm.commands = commandTimes(tb, admin)
	}
	load := <-loaded
	tl.end(tb)
	if tally != nil {
		tally.stopped.Store(true)
	}
	// The limiters' counts and the tokens held, first: the syncers go on
	// refilling while the rest is read (Redis's counters and the buckets'
	// shares, a call per tenant), and what they lease after the load
	// ended is no token the run left unspent. Nor is what expires then:
	// the tokens held at the end, and a rate share's tokens that come due
	// after it, expire a lease lifetime later. Counted seconds later,
	// they made most of a 32 x 2,000 run's "expired unspent" with rate
	// shares (docs/performance.md, "Tokens that expired after the load").
	// The counts are read at once, then the tokens held (heldBy, which
	// reads the limiters at once), and the time that read took is
	// reported (heldRead).
	endedLoad := time.Now()
	var stats leasequota.Stats
	for _, l := range lims {
		st := l.Stats()
		stats.Calls += st.Calls
		stats.Errors += st.Errors
		stats.Requested += st.Requested
		stats.Granted += st.Granted
		stats.Returned += st.Returned
		stats.Forfeited += st.Forfeited
		stats.Expired += st.Expired
		stats.HeldBack += st.HeldBack
		stats.WindowCuts += st.WindowCuts
	}
	var held int64
	for _, h := range heldBy(lims, names) {
		held += int64(h)
	}
	heldRead := time.Since(endedLoad)
	ended := time.Now()
	end := redisTime(tb, admin)
	res := fleetResult{
		load:     load,
		elapsed:  end.Sub(start),
		redisCPU: redisCPU(tb, admin) - cpu0,
		evalsha:  commandCalls(tb, admin, "evalsha") - calls0,
		exists:   commandCalls(tb, admin, "exists") - exists0,
		stats:    stats,
		heldRead: heldRead,
	}
	if !warmAt.IsZero() {
		res.steady = fleetSteady{redisCPU: redisCPU(tb, admin) - warm.redisCPU, evalsha: commandCalls(tb, admin, "evalsha") - warm.evalsha,
			exists: commandCalls(tb, admin, "exists") - warm.exists, admitted: admitted.Load() - warm.admitted, wall: ended.Sub(warmAt),
			commands: commandTimes(tb, admin)}
		for k, v := range warm.commands {
			res.steady.commands[k] -= v
		}
		least := int64(-1)
		for i := range perTenant {
			if n := perTenant[i].Load() - warmTenants[i]; least < 0 || n < least {
				least = n
			}
		}
		res.steady.worst = float64(least) / (fleetRate * res.steady.wall.Seconds())
	}
	// What the buckets hold, read with script calls of their own: after
	// Redis's counters, which must count the limiters' calls alone.
	res.left = bucketLevelsOn(tb, admin, prefix, names, func(int) leasequota.Quota { return fleetQuota })
	res.sharesInForce = sharesRecorded(ctx, admin, prefix, names)
	res.held = held
	closeAll()
	res.sharesAfterClose = sharesRecorded(ctx, admin, prefix, names)
	if closeErrs > 0 {
		tb.Logf("%v: Close failed on %d of %d limiters (their unspent tokens are forfeited), first: %s", s, closeErrs, len(lims), firstCloseErr)
	}
	res.closeErrs = closeErrs
	for t, n := range load.admitted {
		if float64(n) > res.bound() {
			res.overBound = append(res.overBound, fmt.Sprintf("%s admitted %d > %.1f", names[t], n, res.bound()))
		}
	}
	return res
}

// redisTime is the Redis server's clock.
func redisTime(tb testing.TB, c *redis.Client) time.Time {
	tb.Helper()
	t, err := c.Time(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// redisCPU is the server's CPU time so far (INFO cpu, user + sys).
func redisCPU(tb testing.TB, c *redis.Client) time.Duration {
	tb.Helper()
	s := sumInfoFields(tb, []*redis.Client{c}, "cpu", "used_cpu_user", "used_cpu_sys")
	return time.Duration(s * float64(time.Second))
}

// commandCalls is how many times the server ran command (lower case),
// from INFO commandstats.
func commandCalls(tb testing.TB, c *redis.Client, command string) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	n, err := commandCallsIn(info, command)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// commandCallsIn is how many times the server ran command (lower case)
// by info, INFO's commandstats section (0 when it never ran).
func commandCallsIn(info, command string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		// calls=12,usec=...
		f, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(f, "calls="), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats %q: %w", line, err)
		}
		return n, nil
	}
	return 0, nil
}

// TestFleet runs the smallest fleet shape of issue #15, 4 instances x 100
// tenants offered 3x their quota, for 6 s on real Redis: no tenant may
// admit more than Burst + Rate*elapsed, and the tenants together must get
// 75% of what they could have (0.83-0.94 measured under -race with two
// other test runs loading the 2 cores: the syncers' ticks come late and
// starved instances return to a fuller bucket; 0.95+ is #15's goal for
// BenchmarkFleet), or utilizationFloor's share of what the machine
// delivered to the test process when that is less (0.698 was seen with
// the load average at 6): per tenant, the lesser of that bound and
// what the machine managed to offer.
//
// The lease calls get 1s instead of the default 50ms: a sync round
// pipelines up to 100 acquire scripts per instance, and on a busy 2-core
// machine under the race detector four such pipelines queued in Redis
// take longer than 50ms (even 250ms was seen: the client's write timed
// out); the calls then fail and their tenants go to the failure mode,
// which is issue #15's subject (BenchmarkFleet measures it with the
// defaults), not this test's. The run is 6 s: the leases held unspent
// when the load stops are a fixed loss (6 to 12 tokens per tenant here;
// a starved instance leases its share of the burst at once, Burst/4),
// 2 to 3 % of a 4 s bound, half that of a 6 s one.
func TestFleet(t *testing.T) {
	srv := redistest.Shared(t) // before the leak check: the harness lives for the package
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := fleetShape{instances: 4, tenants: 100, over: fleetOver}
	probe := startStallProbe()
	r := runFleet(t, srv, s, 6*time.Second, redistest.Logger(t), nil, leasequota.WithRedisTimeout(time.Second))
	probe.Stop()
	t.Log(probe)
	offered, admitted := r.load.totals()
	t.Logf("%v: offered %d (%.0f/s, %.2fx the quota; the schedule asks %.0f/s), admitted %d in %v (Redis clock)",
		s, offered, r.load.deliveredRate(), r.load.deliveredRate()/(fleetRate*float64(s.tenants)), s.offeredRate(), admitted, r.elapsed)
	t.Logf("utilization %.3f of Σ(Burst + Rate·elapsed), %.3f of what the load could have had; lease calls %d (%d failed), EVALSHA %d; decisions by the failure mode %d; leased tokens held unspent at the end %d (%.1f per tenant)",
		r.utilization(), r.deliveredUtilization(), r.stats.Calls, r.stats.Errors, r.evalsha, r.load.failed, r.held, float64(r.held)/float64(s.tenants))
	for _, o := range r.overBound {
		t.Errorf("bound violated: %s (Burst %d + Rate %d * %v)", o, fleetBurst, fleetRate, r.elapsed)
	}
	if u, floor := r.deliveredUtilization(), min(0.75, utilizationFloor(probe, 0.8)); u < floor {
		t.Errorf("utilization %.3f of what the offered load could have had, want >= %.3f", u, floor)
	}
}

// TestFleetRateShares runs TestFleet's shape, 4 instances x 100 tenants
// offered 3x their quota, with rate shares of a 2 s period, for 8 s on
// real Redis: no tenant may admit more than Burst + Rate*elapsed, shares
// must be in force on the buckets when the load ends (and none once the
// limiters have closed, which ends them), and after the
// first seconds (each instance's first call registers it; the second asks
// for a share) the instances call Redis about once a period per tenant,
// under half the calls of TestFleet's leases of tokens over the same
// time. (The bound over many seeded schedules is the root package's
// TestSimulation, with shares in half of its scenarios.)
func TestFleetRateShares(t *testing.T) {
	srv := redistest.Shared(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := fleetShape{instances: 4, tenants: 100, over: fleetOver}
	probe := startStallProbe()
	old := *fleetWarmup
	*fleetWarmup = 4 * time.Second
	defer func() { *fleetWarmup = old }()
	r := runFleet(t, srv, s, 8*time.Second, redistest.Logger(t), nil, leasequota.WithRedisTimeout(time.Second), leasequota.WithRateShares(2*time.Second, 0))
	probe.Stop()
	t.Log(probe)
	pairs := float64(s.instances * s.tenants)
	perPair := float64(r.steady.exists) / r.steady.wall.Seconds() / pairs
	t.Logf("utilization %.3f of Σ(Burst + Rate·elapsed), %.3f of what the load could have had; %d of %d tenants with shares in force at the end, %d after Close; after 4 s, %.3f scripts a pair and second, admitted %.3f of the rate",
		r.utilization(), r.deliveredUtilization(), r.sharesInForce, s.tenants, r.sharesAfterClose, perPair,
		float64(r.steady.admitted)/r.steady.wall.Seconds()/(fleetRate*float64(s.tenants)))
	for _, o := range r.overBound {
		t.Errorf("bound violated: %s (Burst %d + Rate %d * %v)", o, fleetBurst, fleetRate, r.elapsed)
	}
	if r.sharesInForce < s.tenants/2 {
		t.Errorf("%d of %d tenants had rate shares in force when the load ended, want most", r.sharesInForce, s.tenants)
	}
	// Close ends the shares it holds. A few may stay in force, to end
	// with their epochs: one granted by a call that Close canceled after
	// Redis ran it (its limiter never heard of it), or whose end failed
	// on a busy machine (Close says so); without the ends, every tenant
	// keeps its shares.
	if r.sharesAfterClose > s.tenants/20 {
		t.Errorf("%d tenants had rate shares in force once every limiter had closed (%d limiters' Close failed), want at most %d (Close ends them)",
			r.sharesAfterClose, r.closeErrs, s.tenants/20)
	}
	// One renewal a period (0.5 a pair and second) and the calls of the
	// pairs that got no share yet; leases of tokens make 1.3 here
	// (BenchmarkFleet/4x100).
	if perPair > 0.8 {
		t.Errorf("%.3f scripts a pair and second after the warm-up, want about one a period (0.5)", perPair)
	}
	if u, floor := r.deliveredUtilization(), min(0.75, utilizationFloor(probe, 0.8)); u < floor {
		t.Errorf("utilization %.3f of what the offered load could have had, want >= %.3f", u, floor)
	}
}
