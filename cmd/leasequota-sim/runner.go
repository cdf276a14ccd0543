package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease"
)

const (
	tickEvery    = 5 * time.Millisecond  // how often a request goroutine issues what is due
	maxTickGap   = 50 * time.Millisecond // demand older than this is dropped, not bunched
	sampleEvery  = 8                     // every 8th decision's latency is measured
	latencyCap   = 2048                  // latency samples kept per goroutine and class
	closeTimeout = 5 * time.Second       // for Limiter.Close
	minStep      = 100 * time.Millisecond
	maxSeriesLen = 300
)

// runner runs one simulation. Its fields are set up before the run and
// read-only during it, except what each goroutine owns.
type runner struct {
	cfg      Config
	w        *workload
	be       *backend
	prefix   string
	keyIndex map[string]int
	step     time.Duration  // width of a time-series bucket
	nb       int            // number of buckets covering cfg.Duration
	metrics  *metricsServer // -metrics: where the limiters report, nil without
	start    time.Time
	insts    []*instance
	outage   struct{ from, to time.Duration }
	hasOut   bool
	logs     logBook
	// Redis CPU used during the workload (INFO cpu), when it could be read;
	// cpu0 is the reading at the start.
	cpu   time.Duration
	cpuOK bool
	cpu0  cpuSample
	// workT is when every request goroutine had stopped (since start):
	// the T of the fleet headline's utilization, which Close's time after
	// it must not dilute.
	workT time.Duration
	// The account of the tight scenario (nil ledger for the others): the
	// buckets followed through the script replies, its length T, and the
	// leased tokens each tenant's instances held when it closed.
	ledger   *bucketLedger
	accountT time.Duration
	held     []int64
	// scripts are each tenant's lease script runs during the workload
	// (the final Close's releases excluded), read with Totals.Scripts.
	scripts []int64
}

// instance is one simulated service instance (one slot of the workload).
type instance struct {
	slot    int
	cc      *callCounter
	client  redis.UniversalClient
	lim     atomic.Pointer[leasequota.Limiter]
	workers []*workerStats

	// Written by the instance's lease sampler, read after it ends.
	leaseSum []float64 // [class*nb + bucket] sum of lease targets sampled
	leaseN   []int32   // number of samples added to leaseSum
	heldSum  []float64 // [class*nb + bucket] sum of leased tokens held, sampled with leaseSum

	// Set when the instance stops.
	stats    leasequota.Stats
	closeErr error
	newErr   error
}

// workerStats are one request goroutine's counts: written by it alone,
// read after it ends; the atomics are read live by the progress line.
type workerStats struct {
	tenants []int // the tenants this goroutine drives
	// Per tenant (k-th of tenants) per bucket: [k*nb + b]: decisions,
	// admissions paid with leased tokens, admissions without a lease.
	off, adm, deg []int32
	// Per tenant totals: denied for lack of quota, denied by a failure
	// mode.
	denied, unavail []int64
	// Latency samples per class.
	lat  [][]time.Duration
	seen []int64
	rng  *rand.Rand

	// Per bucket: admissions through this goroutine, with or without a lease.
	all []int32
	// Failure modes seen in degraded decisions, by FailureMode value.
	modes [8]int64

	decisions, admitted, deniedN atomic.Int64
}

// Run runs the simulation of cfg and returns its result. Progress goes to
// prog (nil for none). It does not run the baseline: see runBaseline.
func Run(ctx context.Context, cfg Config, prog *progress) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := newWorkload(cfg)
	from, to, hasOut := w.Outage()
	be, err := openBackend(ctx, cfg, hasOut)
	if err != nil {
		return nil, err
	}
	defer be.Close()
	r := newRunner(cfg, w, be)
	r.outage.from, r.outage.to, r.hasOut = from, to, hasOut
	if cfg.Metrics != "" {
		if r.metrics, err = startMetrics(cfg.Metrics); err != nil {
			return nil, err
		}
		defer r.metrics.Close()
		if prog != nil {
			prog.note(fmt.Sprintf("metrics: http://%s/metrics", r.metrics.Addr))
		}
	}
	res, err := r.run(ctx, prog)
	if err != nil {
		return nil, err
	}
	if cfg.Baseline > 0 {
		res.Baseline, err = runBaseline(ctx, cfg, w, be, r.prefix, prog)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
	}
	return res, nil
}

func newRunner(cfg Config, w *workload, be *backend) *runner {
	r := &runner{cfg: cfg, w: w, be: be}
	r.prefix = fmt.Sprintf("leasequota-sim:%08x:", rand.Uint32())
	r.keyIndex = make(map[string]int, len(w.Tenants))
	for i, t := range w.Tenants {
		r.keyIndex[lease.Key(r.prefix, t.Name)] = i
	}
	r.step = max(minStep, (cfg.Duration / maxSeriesLen).Round(10*time.Millisecond))
	r.nb = int((cfg.Duration + r.step - 1) / r.step)
	if cfg.Scenario == "tight" {
		r.ledger = newBucketLedger(w, r.keyIndex, r.step, r.nb, cfg.Refresh)
	}
	return r
}

// elapsed is the time since the run started.
func (r *runner) elapsed() time.Duration { return time.Since(r.start) }

// bucket is the time-series bucket of a time.
func (r *runner) bucket(t time.Time) int {
	b := int(t.Sub(r.start) / r.step)
	return min(max(b, 0), r.nb-1)
}

// sleepUntil waits until elapsed() >= t or ctx is done.
func (r *runner) sleepUntil(ctx context.Context, t time.Duration) bool {
	d := t - r.elapsed()
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *runner) run(ctx context.Context, prog *progress) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := r.w.Slots()
	r.insts = make([]*instance, len(slots))
	nc := len(r.w.Classes)
	for s := range slots {
		inst := &instance{slot: s}
		inst.cc = newCallCounter(r.keyIndex, len(r.w.Tenants))
		inst.cc.ledger = r.ledger
		inst.client = r.be.newClient(inst.cc)
		inst.leaseSum = make([]float64, nc*r.nb)
		inst.leaseN = make([]int32, nc*r.nb)
		inst.heldSum = make([]float64, nc*r.nb)
		for k := 0; k < r.cfg.Workers; k++ {
			ws := &workerStats{rng: rand.New(rand.NewPCG(r.cfg.Seed, uint64(s*maxWorkers+k)))}
			for ti := k; ti < len(r.w.Tenants); ti += r.cfg.Workers {
				ws.tenants = append(ws.tenants, ti)
			}
			n := len(ws.tenants)
			ws.off, ws.adm, ws.deg = make([]int32, n*r.nb), make([]int32, n*r.nb), make([]int32, n*r.nb)
			ws.denied, ws.unavail = make([]int64, n), make([]int64, n)
			ws.all = make([]int32, r.nb)
			ws.lat, ws.seen = make([][]time.Duration, nc), make([]int64, nc)
			inst.workers = append(inst.workers, ws)
		}
		r.insts[s] = inst
	}
	defer func() {
		for _, inst := range r.insts {
			inst.client.Close()
		}
	}()

	calls := newCallSeries(r.nb)
	if prog != nil {
		prog.start("leasequota")
	}
	r.cpu0 = r.be.redisCPU(ctx)
	r.start = time.Now()
	r.logs.start = r.start
	if r.ledger != nil {
		r.ledger.begin(r.start)
	}
	// Instances running at the end of the workload close together, once
	// all their requests are done and the traffic was sampled, so that
	// Close's traffic (returning leases) is counted apart.
	var wg, working sync.WaitGroup
	closeNow := make(chan struct{})
	for _, inst := range r.insts {
		wg.Add(1)
		working.Add(1)
		go func() {
			defer wg.Done()
			r.runInstance(ctx, inst, working.Done, closeNow)
		}()
	}
	if r.hasOut {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.sleepUntil(ctx, r.outage.from) {
				r.be.setDown(true)
				if r.sleepUntil(ctx, r.outage.to) {
					r.be.setDown(false)
				}
			}
		}()
	}
	stopBusy := make(chan struct{})
	var busy sync.WaitGroup
	for range r.cfg.Busy {
		busy.Add(1)
		go func() {
			defer busy.Done()
			spin(stopBusy)
		}()
	}
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() {
		defer close(samplerDone)
		r.sampleCalls(ctx, calls, prog, stopSampler)
	}()
	working.Wait()
	r.workT = r.elapsed()
	close(stopBusy)
	busy.Wait()
	r.closeAccount()
	r.cpu, r.cpuOK = cpuSince(r.cpu0, r.be.redisCPU(ctx))
	cpuEnd := cpuPoint{at: r.elapsed(), used: r.cpu}
	r.be.setDown(false)
	close(stopSampler)
	<-samplerDone
	// Each tenant's script runs of the workload, read with the total so
	// that the classes' calls/1k and the all row's count the same runs.
	r.scripts = make([]int64, len(r.w.Tenants))
	var scripts int64
	for _, inst := range r.insts {
		for i := range inst.cc.scripts {
			n := inst.cc.scripts[i].Load()
			r.scripts[i] += n
			scripts += n
		}
	}
	calls.finish(r.nb, r.step, r.totalRoundTrips(), scripts, r.totalErrors(), r.totalEvals(), cpuEnd, r.cpuOK)
	close(closeNow)
	wg.Wait()
	end := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var errs []error
	for _, inst := range r.insts {
		if inst.newErr != nil {
			errs = append(errs, fmt.Errorf("instance %d: %w", inst.slot, inst.newErr))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if prog != nil {
		prog.done(r.snapshot())
	}
	return r.result(end, calls), nil
}

// runInstance runs slot s: starts its limiter at the slot's start, drives
// its request goroutines until its stop, then closes the limiter: at once
// when it stops before the end of the workload, else after calling done
// and when closeNow is closed.
func (r *runner) runInstance(ctx context.Context, inst *instance, done func(), closeNow <-chan struct{}) {
	sl := r.w.Slots()[inst.slot]
	var once sync.Once
	finished := func() { once.Do(done) }
	defer finished()
	if !r.sleepUntil(ctx, sl.Start) {
		return
	}
	opts := []leasequota.Option{
		leasequota.WithQuotaFunc(r.w.quotaFunc()),
		leasequota.WithKeyPrefix(r.prefix),
		leasequota.WithRefreshInterval(r.cfg.Refresh),
		leasequota.WithLeaseTTL(r.cfg.LeaseTTL),
		leasequota.WithReservation(r.cfg.Reservation),
		leasequota.WithRateShares(r.cfg.Shares, 0),
		leasequota.WithRedisTimeout(r.cfg.redisTimeout()),
		leasequota.WithSeed(r.cfg.Seed*1000003 + uint64(inst.slot)),
		leasequota.WithLogger(r.logs.logger(inst.slot)),
		leasequota.WithName(fmt.Sprintf("instance-%d", inst.slot)),
	}
	if r.metrics != nil {
		opts = append(opts, leasequota.WithMeterProvider(r.metrics.Provider))
	}
	if m := failureModes[r.cfg.Failure]; m != leasequota.FailDefault {
		opts = append(opts, leasequota.WithFailureMode(m))
	}
	lim, err := leasequota.New(inst.client, opts...)
	if err != nil {
		inst.newErr = err
		return
	}
	inst.lim.Store(lim)
	stopLease := make(chan struct{})
	leaseDone := make(chan struct{})
	go func() {
		defer close(leaseDone)
		r.sampleLeases(inst, lim, stopLease)
	}()
	var wg sync.WaitGroup
	for _, ws := range inst.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx, inst.slot, lim, ws, sl.Stop)
		}()
	}
	wg.Wait()
	close(stopLease)
	<-leaseDone
	if sl.Stop >= r.cfg.Duration {
		finished()
		<-closeNow
	}
	cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	inst.closeErr = lim.Close(cctx)
	cancel()
	inst.stats = lim.Stats()
}

// work is one request goroutine: every tick it issues, for each of its
// tenants, the requests the workload says are due on this instance.
func (r *runner) work(ctx context.Context, slot int, lim *leasequota.Limiter, ws *workerStats, stop time.Duration) {
	// A random start in [0, 1) of each tenant's carry keeps tenants of the
	// same rate from issuing their requests in the same ticks.
	due := make([]float64, len(ws.tenants))
	for k := range due {
		due[k] = ws.rng.Float64()
	}
	last := r.elapsed()
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	var n uint64
	for {
		now := r.elapsed()
		if now >= stop {
			return
		}
		dt := min(now-last, maxTickGap)
		last = now
		wgt := r.w.Weight(slot, now)
		for k, ti := range ws.tenants {
			due[k] += r.w.Rate(ti, slot, now, wgt) * dt.Seconds()
			cnt := int(due[k])
			due[k] -= float64(cnt)
			name := r.w.Tenants[ti].Name
			ci := r.w.Tenants[ti].Class
			for range cnt {
				n++
				t0 := time.Now()
				d := lim.AllowN(ctx, name, 1)
				t1 := t0
				timed := n%sampleEvery == 0
				if timed || d.Reason != leasequota.ReasonLeased {
					t1 = time.Now()
				}
				b := r.bucket(t1)
				ws.off[k*r.nb+b]++
				ws.decisions.Add(1)
				if d.Allowed {
					ws.all[b]++
				}
				if d.Mode != leasequota.FailDefault && int(d.Mode) < len(ws.modes) {
					ws.modes[d.Mode]++
				}
				switch {
				case d.Allowed && byLease(d.Reason):
					ws.adm[k*r.nb+b]++
					ws.admitted.Add(1)
				case d.Allowed:
					ws.deg[k*r.nb+b]++
					ws.admitted.Add(1)
				case d.Mode != leasequota.FailDefault || d.Reason == leasequota.ReasonUnavailable:
					ws.unavail[k]++
					ws.deniedN.Add(1)
				default:
					ws.denied[k]++
					ws.deniedN.Add(1)
				}
				if timed {
					ws.sample(ci, t1.Sub(t0))
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// byLease reports whether an admission was paid for with leased tokens:
// the admissions the bound covers. Anything else admitted (the fallback
// or fail-open modes while Redis is unreachable) is degraded and counted
// apart.
func byLease(r leasequota.Reason) bool {
	return r == leasequota.ReasonLeased || r == leasequota.ReasonColdStart || r == leasequota.ReasonRefilled
}

// sample keeps a latency sample for class ci (reservoir sampling).
func (ws *workerStats) sample(ci int, d time.Duration) {
	ws.seen[ci]++
	if len(ws.lat[ci]) < latencyCap {
		ws.lat[ci] = append(ws.lat[ci], d)
		return
	}
	if j := ws.rng.Int64N(ws.seen[ci]); j < latencyCap {
		ws.lat[ci][j] = d
	}
}

// sampleLeases records, every step, the lease size the limiter aims for
// for each tenant it tracks.
func (r *runner) sampleLeases(inst *instance, lim *leasequota.Limiter, stop <-chan struct{}) {
	tick := time.NewTicker(r.step)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		b := r.bucket(time.Now())
		for _, t := range r.w.Tenants {
			info, ok := lim.Tenant(t.Name)
			if !ok {
				continue
			}
			inst.leaseSum[t.Class*r.nb+b] += float64(info.Lease)
			inst.heldSum[t.Class*r.nb+b] += float64(info.Tokens)
			inst.leaseN[t.Class*r.nb+b]++
		}
	}
}

// callSeries is the cumulative Redis traffic, and Redis CPU, sampled at
// each step.
type callSeries struct {
	// [k] = total at time k*step; -1 when not sampled.
	roundTrips, scripts, errors, evals []int64
	// cpu[k] is the Redis CPU used from the start to k*step, in
	// nanoseconds (INFO cpu), computed by finish from the readings in
	// cpuAt (a reading that failed is skipped). cpuOK is false when the
	// readings at the start or the end failed (or Redis is the embedded
	// one): then cpu is unknown.
	cpu   []int64
	cpuAt []cpuPoint
	cpuOK bool
}

// cpuPoint is a reading of the Redis CPU used since the start, and when
// it was read (the middle of the INFO call).
type cpuPoint struct{ at, used time.Duration }

func newCallSeries(nb int) *callSeries {
	c := &callSeries{roundTrips: make([]int64, nb+1), scripts: make([]int64, nb+1), errors: make([]int64, nb+1),
		evals: make([]int64, nb+1), cpu: make([]int64, nb+1)}
	for i := 1; i <= nb; i++ {
		c.roundTrips[i], c.scripts[i], c.errors[i], c.evals[i] = -1, -1, -1, -1
	}
	return c
}

// finish records the totals at the end and fills unsampled points. The
// Redis CPU series is the readings, the final one (end) included,
// interpolated at each bucket's edge: a reading is attributed to when it
// was made, which can be well after its tick (INFO waits behind queued
// scripts; a starved sampler skips ticks). The last bucket ends with the
// final reading, so the series adds up to the total.
func (c *callSeries) finish(nb int, step time.Duration, rt, sc, errs, ev int64, end cpuPoint, cpuOK bool) {
	c.roundTrips[nb], c.scripts[nb], c.errors[nb], c.evals[nb] = rt, sc, errs, ev
	c.cpuOK = cpuOK
	for i := 1; i < nb; i++ {
		if c.roundTrips[i] < 0 {
			c.roundTrips[i], c.scripts[i], c.errors[i], c.evals[i] = c.roundTrips[i-1], c.scripts[i-1], c.errors[i-1], c.evals[i-1]
		}
	}
	if !c.cpuOK {
		return
	}
	// The readings from (0, 0) to end, made non-decreasing in both time
	// and CPU, and never above the total.
	pts := []cpuPoint{{}}
	for _, p := range append(c.cpuAt, end) {
		last := pts[len(pts)-1]
		p.at, p.used = max(p.at, last.at), min(max(p.used, last.used), end.used)
		pts = append(pts, p)
	}
	j := 0
	for k := 1; k < nb; k++ {
		t := time.Duration(k) * step
		for j+1 < len(pts)-1 && pts[j+1].at <= t {
			j++
		}
		a, b := pts[j], pts[j+1]
		v := b.used
		if b.at > a.at && t < b.at {
			v = a.used + time.Duration(float64(b.used-a.used)*float64(t-a.at)/float64(b.at-a.at))
		}
		c.cpu[k] = int64(v)
	}
	c.cpu[nb] = int64(end.used)
}

// sampleCalls samples the Redis traffic (and CPU, on a real server) every
// step and drives the progress line.
func (r *runner) sampleCalls(ctx context.Context, c *callSeries, prog *progress, stop <-chan struct{}) {
	tick := time.NewTicker(r.step)
	defer tick.Stop()
	var progTick <-chan time.Time
	if prog != nil {
		t := time.NewTicker(prog.every())
		defer t.Stop()
		progTick = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			k := int((r.elapsed() + r.step/2) / r.step)
			if k > 0 && k < r.nb {
				c.roundTrips[k], c.scripts[k], c.errors[k], c.evals[k] = r.totalRoundTrips(), r.totalScripts(), r.totalErrors(), r.totalEvals()
				if r.cpu0.ok {
					t0 := r.elapsed()
					if cpu, ok := cpuSince(r.cpu0, r.be.redisCPU(ctx)); ok {
						c.cpuAt = append(c.cpuAt, cpuPoint{at: (t0 + r.elapsed()) / 2, used: cpu})
					}
				}
			}
		case <-progTick:
			prog.update(r.snapshot())
		}
	}
}

func (r *runner) totalRoundTrips() int64 {
	var n int64
	for _, inst := range r.insts {
		n += inst.cc.roundTrips.Load()
	}
	return n
}

// totalErrors is the failed lease calls of all limiters so far.
func (r *runner) totalErrors() int64 {
	var n int64
	for _, inst := range r.insts {
		if lim := inst.lim.Load(); lim != nil {
			n += lim.Stats().Errors
		}
	}
	return n
}

// totalEvals is the script runs (EVAL, EVALSHA) of all instances so far.
func (r *runner) totalEvals() int64 {
	var n int64
	for _, inst := range r.insts {
		n += inst.cc.evals.Load()
	}
	return n
}

func (r *runner) totalScripts() int64 {
	var n int64
	for _, inst := range r.insts {
		for i := range inst.cc.scripts {
			n += inst.cc.scripts[i].Load()
		}
	}
	return n
}

// snapshot is the live totals for the progress line.
func (r *runner) snapshot() snapshot {
	s := snapshot{Elapsed: r.elapsed(), RoundTrips: r.totalRoundTrips()}
	for _, inst := range r.insts {
		for _, ws := range inst.workers {
			s.Decisions += ws.decisions.Load()
			s.Admitted += ws.admitted.Load()
			s.Denied += ws.deniedN.Load()
		}
	}
	return s
}

// spin keeps a CPU busy until stop is closed (-busy): the Go scheduler
// preempts it, as it would a request handler that computes.
func spin(stop <-chan struct{}) {
	x := uint64(1)
	for {
		select {
		case <-stop:
			spinSink.Add(x)
			return
		default:
		}
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
}

// spinSink keeps spin's arithmetic from being optimized away.
var spinSink atomic.Uint64
