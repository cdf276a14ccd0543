package integration

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

var fleetDuration = flag.Duration("fleet.duration", 8*time.Second,
	"length of each BenchmarkFleet load, run once through leasequota and once through redis_rate")

var fleetReservation = flag.Duration("fleet.reservation", leasequota.DefaultReservation,
	"the limiters' WithReservation in BenchmarkFleet (0: reservations off)")

var fleetShares = flag.Duration("fleet.shares", 0,
	"the limiters' WithRateShares period in BenchmarkFleet (0: rate shares off, the default), with -fleet.headroom")

var fleetHeadroom = flag.Float64("fleet.headroom", 0, "the limiters' WithRateShares headroom in BenchmarkFleet, with -fleet.shares")

var fleetWarmup = flag.Duration("fleet.warmup", 0,
	"the first part of each BenchmarkFleet load that the steady-state metrics (steady-*) leave out (0: none, and no steady-state metrics)")

var fleetTimeout = flag.Duration("fleet.timeout", leasequota.DefaultRefreshInterval/2,
	"the limiters' WithRedisTimeout in BenchmarkFleet (the default is the library's for its default refresh interval)")

var fleetColdWait = flag.Duration("fleet.coldwait", leasequota.DefaultColdStartWait,
	"the limiters' WithColdStartWait in BenchmarkFleet (0: a cold tenant's request is denied at once)")

// fleetGoroutines is the load goroutines per instance in BenchmarkFleet
// and TestFleet. Each serves its tenants one request after the other, and
// a tenant's first request on an instance waits for its first lease (up
// to WithColdStartWait), so a goroutine's tenants start one after the
// other, and one cold start holds up the requests of all of them (unless
// -fleet.coldasync). A service's requests are concurrent: more goroutines
// come closer to that, and offer the load of the tenants whose lease is
// there while others wait (docs/performance.md, "A starved process is not
// a down Redis"), but on a machine that Redis shares with the load they
// also take Redis's CPU.
var fleetGoroutines = flag.Int("fleet.goroutines", 4,
	"the load goroutines per instance in BenchmarkFleet, each serving its share of the tenants one request after another")

// fleetColdAsync makes driveFleet decide each pair's first request in a
// goroutine of its own, so that a tenant's wait for its first lease does
// not hold up the load goroutine's other tenants: every pair starts at
// once (see driveFleet).
var fleetColdAsync = flag.Bool("fleet.coldasync", false,
	"BenchmarkFleet decides each pair's first request in a goroutine of its own, so that no cold start holds up other tenants: every pair starts at once")

// fleetRotate makes each instance's load goroutines ask for their tenants
// from a different place in their list (instance i from i/instances of
// it, then round), where by default every instance asks for them in the
// same order: what changes when a fleet's instances see the tenants' first
// requests in different orders.
var fleetRotate = flag.Bool("fleet.rotate", false,
	"each instance's load in BenchmarkFleet asks for the tenants from a different place in their order")

// fleetExpected is the limiters' WithExpectedInstances in BenchmarkFleet:
// 0 (the default) gives none, as the shapes' figures were measured; the
// shape's instance count is what a deployment that knows its fleet would
// give.
var fleetExpected = flag.Int("fleet.expected", 0,
	"the limiters' WithExpectedInstances in BenchmarkFleet (0: none)")

// fleetShapes are the shapes of issue #15's table (each offered
// -fleet.offered).
var fleetShapes = []fleetShape{{instances: 4, tenants: 100}, {instances: 8, tenants: 500}, {instances: 16, tenants: 1000}, {instances: 32, tenants: 2000}}

// fleetOffered is the load BenchmarkFleet offers each tenant, over its
// Rate: issue #15's 3 by default; below 1 the tenants are within their
// quota, and admitted/offered says how many of their requests got through.
var fleetOffered = flag.Float64("fleet.offered", fleetOver,
	"the load BenchmarkFleet offers each tenant, as a multiple of its Rate (below 1: within quota)")

// BenchmarkFleet runs each fleet shape of issue #15 on one redis-server:
// N Limiters (each with its own client) share T tenants of Rate 100 and
// Burst 100, each tenant offered 3x its quota (-fleet.offered) evenly over the instances,
// for -fleet.duration (default 8s). Then, on the same server, one after
// the other (INFO cpu cannot split two clients running at once), the same
// load goes through redis_rate: one GCRA script call per decision, the
// load goroutines calling it synchronously (so its offered rate is what
// round trips allow; its cost per decision is the point).
//
// The limiters reserve with -fleet.reservation (or ask for rate shares of
// -fleet.shares' period and -fleet.headroom), time their Redis calls
// out after -fleet.timeout and let a cold tenant's request wait up to
// -fleet.coldwait (each by default the library's). With -fleet.trace it
// logs, for each second of the load, the tenants the acquire calls served
// by what they asked for (tokens only, a rate share, a share's end).
// With -v it logs the utilization of each tenth of the tenants in the
// order the load asks for them, which -fleet.rotate makes differ between
// instances, and where the bound went: admitted, held by the limiters
// when the load ended, left in the buckets then (read with want-0
// acquires), and the rest (refill before a bucket's first call or
// spilled while it was full, tokens expired or forfeited). With
// -fleet.timeline (an interval) it logs, that often while the load runs,
// Redis's CPU, the tenant scripts, the requests admitted and the failed
// lease calls since the line before.
// One op is one full run of both; run it with -benchtime 1x. It fails
// if a tenant admitted more than Burst + Rate*elapsed, elapsed being on
// the Redis clock from before the first decision to after the last.
// Metrics (averages over the ops):
//
//	utilization        admitted / Σ(Burst + Rate·elapsed) over the tenants
//	worst-tenant       the least a tenant admitted over its Burst + Rate·elapsed
//	offered-x          the load the machine delivered, over the quota (the schedule asks
//	                   -fleet.offered, 3 by default)
//	admitted/offered   the requests leasequota admitted over those the load made
//	lq-redis-µs/adm    Redis CPU (INFO cpu user+sys, delta) per admitted request, leasequota
//	rr-redis-µs/dec    Redis CPU per decision, redis_rate
//	lq/rr              the ratio of the two
//	evalsha/s          EVALSHA calls per second during the leasequota load
//	tenant-scripts/pair/s  tenants served by those calls (a batch serves
//	                   several; counted by the EXISTS each runs), per
//	                   (tenant, instance) pair and second
//	failmode-dec       decisions made by the failure mode (Redis is up all along)
//	lease-errors       failed lease calls (per tenant), summed over the limiters
//	held-back          lease calls the limiters' call budgets held back (Stats.HeldBack)
//	window-cuts        how often the call budgets' windows were halved (Stats.WindowCuts)
//	granted/adm        tokens the limiters' lease calls got, per admitted request
//	                   (above 1: granted tokens expired or went back unspent;
//	                   the log accounts for them: expired, credited, forfeited, held)
//	rr-dec/s           redis_rate decisions per second
//	over-bound         tenants over the bound (must be 0)
//
// With -fleet.warmup, the same after the warm-up (the steady state):
//
//	steady-lq-µs/adm   Redis CPU per admitted request, leasequota
//	steady-lq/rr       its ratio to redis_rate's per decision (over the whole run)
//	steady-evalsha/s, steady-tenant-scripts/pair/s   as above
//	steady-admitted/rate  admitted per second over Σ Rate (1: every
//	                   tenant admitted its rate)
//	steady-worst-tenant   the least a tenant admitted per second over its Rate
func BenchmarkFleet(b *testing.B) {
	if !(*fleetOffered > 0) || math.IsInf(*fleetOffered, 0) {
		b.Fatalf("-fleet.offered=%v: want a finite load > 0", *fleetOffered)
	}
	srv := redistest.StartServer(b)
	for _, s := range fleetShapes {
		s.over = *fleetOffered
		b.Run(s.String(), func(b *testing.B) {
			var m fleetMetrics
			for i := 0; i < b.N; i++ {
				var tally *scriptTally
				if *fleetTrace {
					tally = &scriptTally{}
				}
				r := runFleet(b, srv, s, *fleetDuration, slog.New(slog.DiscardHandler), tally, leasequota.WithReservation(*fleetReservation),
					leasequota.WithRateShares(*fleetShares, *fleetHeadroom),
					leasequota.WithRedisTimeout(*fleetTimeout), leasequota.WithColdStartWait(*fleetColdWait),
					leasequota.WithExpectedInstances(*fleetExpected))
				for _, o := range r.overBound {
					b.Errorf("bound violated: %s (Burst %d + Rate %d * %v)", o, fleetBurst, fleetRate, r.elapsed)
				}
				if tally != nil {
					for _, line := range tally.lines() {
						b.Log(line)
					}
				}
				rr := runFleetRedisRate(b, srv, s, *fleetDuration)
				m.add(s, &r, &rr)
			}
			m.report(b)
		})
	}
}

// redisRateResult is one redis_rate run of a shape.
type redisRateResult struct {
	load     fleetLoad
	redisCPU time.Duration
}

// runFleetRedisRate offers the shape's load for d to redis_rate, one
// limiter (and client) per instance, the tenants' keys under a prefix of
// their own.
func runFleetRedisRate(tb testing.TB, srv *redistest.Server, s fleetShape, d time.Duration) redisRateResult {
	tb.Helper()
	admin := srv.Client()
	defer admin.Close()
	rls := make([]*redis_rate.Limiter, s.instances)
	for i := range rls {
		c := srv.Client()
		defer c.Close()
		rls[i] = redis_rate.NewLimiter(c)
	}
	prefix := redistest.Prefix(tb)
	keys := fleetTenants(s.tenants)
	for i := range keys {
		keys[i] = prefix + keys[i]
	}
	limit := redis_rate.Limit{Rate: fleetRate, Burst: fleetBurst, Period: time.Second}
	cpu0 := redisCPU(tb, admin)
	load := driveFleet(context.Background(), s, d, func(ctx context.Context, inst, t int) (bool, bool) {
		res, err := rls[inst].Allow(ctx, keys[t], limit)
		if err != nil {
			return false, true
		}
		return res.Allowed > 0, false
	})
	return redisRateResult{load: load, redisCPU: redisCPU(tb, admin) - cpu0}
}

// fleetMetrics sums the runs of one shape.
type fleetMetrics struct {
	runs                      int
	util, worst, offeredX     float64
	lqCPU, rrCPU              time.Duration
	lqAdmitted, rrDecisions   int64
	lqOffered                 int64
	evalsha, tenantScripts    int64
	pairs, tenants            int
	lqSeconds, rrSeconds      float64
	failMode, leaseErr, rrErr int64
	heldBack, cuts            int64
	tenths                    [10]float64 // byTenth, summed over the runs
	granted, returned         int64
	forfeited, expired, held  int64
	heldRead                  time.Duration // the longest read of held after a load (fleetResult.heldRead)
	overBound                 int
	left, bound               float64     // tokens left in the buckets at the end, Σ(Burst + Rate·elapsed)
	steady                    fleetSteady // summed over the runs
}

func (m *fleetMetrics) add(s fleetShape, r *fleetResult, rr *redisRateResult) {
	m.runs++
	m.util += r.utilization()
	m.worst += r.worstTenant()
	for i, u := range r.byTenth() {
		m.tenths[i] += u
	}
	m.offeredX += r.load.deliveredRate() / (fleetRate * float64(s.tenants))
	off, adm := r.load.totals()
	m.lqOffered += off
	m.lqAdmitted += adm
	m.lqCPU += r.redisCPU
	m.evalsha += r.evalsha
	m.tenantScripts += r.exists
	m.pairs, m.tenants = s.instances*s.tenants, s.tenants
	m.lqSeconds += r.load.wall.Seconds()
	m.failMode += r.load.failed
	m.leaseErr += r.stats.Errors
	m.heldBack += r.stats.HeldBack
	m.cuts += r.stats.WindowCuts
	m.granted += r.stats.Granted
	m.returned += r.stats.Returned
	m.forfeited += r.stats.Forfeited
	m.expired += r.stats.Expired
	m.held += r.held
	m.heldRead = max(m.heldRead, r.heldRead)
	m.left += r.left
	m.bound += r.bound() * float64(s.tenants)
	m.overBound += len(r.overBound)
	m.steady.redisCPU += r.steady.redisCPU
	m.steady.evalsha += r.steady.evalsha
	m.steady.exists += r.steady.exists
	m.steady.admitted += r.steady.admitted
	m.steady.wall += r.steady.wall
	m.steady.worst += r.steady.worst
	for k, v := range r.steady.commands {
		if m.steady.commands == nil {
			m.steady.commands = map[string]int64{}
		}
		m.steady.commands[k] += v
	}
	dec, _ := rr.load.totals()
	m.rrDecisions += dec - rr.load.failed
	m.rrErr += rr.load.failed
	m.rrCPU += rr.redisCPU
	m.rrSeconds += rr.load.wall.Seconds()
}

func (m *fleetMetrics) report(b *testing.B) {
	if m.runs == 0 {
		return
	}
	n := float64(m.runs)
	us := func(d time.Duration, per int64) float64 {
		if per == 0 {
			return 0
		}
		return float64(d.Microseconds()) / float64(per)
	}
	lq, rr := us(m.lqCPU, m.lqAdmitted), us(m.rrCPU, m.rrDecisions)
	b.ReportMetric(m.util/n, "utilization")
	b.ReportMetric(m.worst/n, "worst-tenant")
	b.ReportMetric(m.offeredX/n, "offered-x")
	if m.lqOffered > 0 {
		b.ReportMetric(float64(m.lqAdmitted)/float64(m.lqOffered), "admitted/offered")
	}
	b.ReportMetric(lq, "lq-redis-µs/adm")
	b.ReportMetric(rr, "rr-redis-µs/dec")
	if rr > 0 {
		b.ReportMetric(lq/rr, "lq/rr")
	}
	b.ReportMetric(float64(m.evalsha)/m.lqSeconds, "evalsha/s")
	b.ReportMetric(float64(m.tenantScripts)/m.lqSeconds/float64(m.pairs), "tenant-scripts/pair/s")
	b.ReportMetric(float64(m.failMode)/n, "failmode-dec")
	b.ReportMetric(float64(m.leaseErr)/n, "lease-errors")
	b.ReportMetric(float64(m.heldBack)/n, "held-back")
	b.ReportMetric(float64(m.cuts)/n, "window-cuts")
	if m.lqAdmitted > 0 {
		b.ReportMetric(float64(m.granted)/float64(m.lqAdmitted), "granted/adm")
	}
	b.ReportMetric(float64(m.rrDecisions)/m.rrSeconds, "rr-dec/s")
	if st := m.steady; st.wall > 0 && st.admitted > 0 {
		// After -fleet.warmup: redis_rate's cost per decision does not
		// depend on the warm-up (one script call each).
		slq := us(st.redisCPU, st.admitted)
		b.ReportMetric(slq, "steady-lq-µs/adm")
		if rr > 0 {
			b.ReportMetric(slq/rr, "steady-lq/rr")
		}
		b.ReportMetric(float64(st.evalsha)/st.wall.Seconds(), "steady-evalsha/s")
		b.ReportMetric(float64(st.exists)/st.wall.Seconds()/float64(m.pairs), "steady-tenant-scripts/pair/s")
		b.ReportMetric(float64(st.admitted)/st.wall.Seconds()/(fleetRate*float64(m.tenants)), "steady-admitted/rate")
		b.ReportMetric(st.worst/n, "steady-worst-tenant")
		// Where Redis's CPU went after the warm-up: the commands' own
		// time (commandstats), the rest (CPU less it) Redis's event
		// loop, networking and its cron.
		var cmds []string
		var inCmds int64
		for k, v := range st.commands {
			if pc := 100 * float64(v) / float64(st.redisCPU.Microseconds()); pc >= 0.5 {
				cmds = append(cmds, fmt.Sprintf("%s %.1f%%", k, pc))
			}
			inCmds += v
		}
		slices.Sort(cmds)
		b.Logf("after the warm-up, Redis CPU %v: in commands %.1f%% (%s), the rest outside them",
			st.redisCPU, 100*float64(inCmds)/float64(st.redisCPU.Microseconds()), strings.Join(cmds, ", "))
	}
	b.ReportMetric(float64(m.overBound)/n, "over-bound")
	if m.rrErr > 0 {
		b.Logf("redis_rate: %d calls failed", m.rrErr)
	}
	tenths := make([]string, len(m.tenths))
	for i, u := range m.tenths {
		tenths[i] = fmt.Sprintf("%.3f", u/n)
	}
	b.Logf("leasequota's utilization by tenth of the tenants, in the order the load asks for them: %s", strings.Join(tenths, " "))
	b.Logf("leasequota's granted tokens: %d granted, %d admitted, %d expired unspent; given back (expiry, eviction): %d credited, %d forfeited; %d held unspent at the end (the counts as the load ended, the tokens held read within %v of it)",
		m.granted, m.lqAdmitted, m.expired, m.returned, m.forfeited, m.held, m.heldRead.Round(time.Millisecond))
	if m.bound > 0 {
		// The rest is refill no instance received: before a bucket's
		// first call, spilled while it was full, taken by calls whose
		// replies were lost, and tokens that expired or were forfeited.
		// (Held counts reserved and rate-share tokens still to come,
		// which the buckets make after the end: the rest is a floor.)
		adm, held := float64(m.lqAdmitted), float64(m.held)
		b.Logf("where Σ(Burst + Rate·elapsed) = %.0f went: admitted %.1f%%, held by the limiters at the end %.1f%%, left in the buckets at the end %.1f%%, the rest %.1f%%",
			m.bound, 100*adm/m.bound, 100*held/m.bound, 100*m.left/m.bound, 100*(m.bound-adm-held-m.left)/m.bound)
	}
	b.Logf("leasequota: %d admitted, Redis CPU %v, %d EVALSHA; redis_rate: %d decisions, Redis CPU %v",
		m.lqAdmitted, m.lqCPU, m.evalsha, m.rrDecisions, m.rrCPU)
}
