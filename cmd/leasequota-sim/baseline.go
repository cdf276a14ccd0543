package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

const (
	baselineConsumers = 8    // goroutines per instance calling the per-request limiter
	baselineQueue     = 1024 // requests waiting per instance; beyond, they are shed
	baselineName      = "redis_rate v10 (GCRA, one script call per decision)"
)

// BaselineResult is the same workload decided by a per-request Redis
// limiter: every decision is one script call to Redis.
type BaselineResult struct {
	Name      string
	Duration  time.Duration // from the first request to the last decision
	Offered   int64         // requests the workload offered
	Decisions int64         // requests decided
	Admitted  int64
	Shed      int64 // offered but never decided: the limiter could not keep up
	Errors    int64 // calls that failed
	// RoundTrips are Redis round trips, counted like the simulation's.
	RoundTrips int64
	// Scripts are the script runs (EVAL, EVALSHA) sent: one per decision,
	// and one more per NOSCRIPT reload.
	Scripts         int64
	DecisionsPerSec float64
	RoundTripsPer1k float64
	P50, P99        time.Duration
	// RedisCPU is the Redis server's CPU time during the run (INFO cpu);
	// HasCPU is false when it could not be read (the embedded Redis).
	RedisCPU time.Duration
	HasCPU   bool
}

// CPUPerDecision is the Redis CPU time per decision in nanoseconds, and
// whether it is known.
func (b *BaselineResult) CPUPerDecision() (float64, bool) {
	return cpuPerDecision(b.RedisCPU, b.HasCPU, b.Decisions)
}

// runBaseline drives the steady form of the workload (no scenario events)
// through redis_rate for cfg.Baseline, on the same Redis, with one client
// per instance like the simulation. Requests that find an instance's queue
// full are shed and counted, so an overloaded Redis shows as a lower
// decision rate instead of an unbounded backlog.
func runBaseline(ctx context.Context, cfg Config, w *workload, be *backend, prefix string, prog *progress) (*BaselineResult, error) {
	steady := *w
	steady.Scenario = "steady"
	n := cfg.Instances
	type inst struct {
		cc      *callCounter
		rl      *redis_rate.Limiter
		ch      chan int
		offered int64
		shed    int64
	}
	insts := make([]*inst, n)
	for i := range insts {
		cc := newCallCounter(nil, 0)
		c := be.newClient(cc)
		defer c.Close()
		insts[i] = &inst{cc: cc, rl: redis_rate.NewLimiter(c), ch: make(chan int, baselineQueue)}
	}
	limits := make([]redis_rate.Limit, len(w.Tenants))
	keys := make([]string, len(w.Tenants))
	for i, t := range w.Tenants {
		limits[i] = redis_rate.Limit{Rate: int(t.Quota.Rate), Burst: int(t.Quota.Burst), Period: time.Second}
		keys[i] = prefix + "baseline:" + t.Name
	}
	var decisions, admitted, errs atomic.Int64
	var latMu sync.Mutex
	var lat []time.Duration

	if prog != nil {
		prog.start("baseline")
	}
	cpu0 := be.redisCPU(ctx)
	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start) }
	snap := func() snapshot {
		s := snapshot{Elapsed: elapsed(), Decisions: decisions.Load(), Admitted: admitted.Load()}
		s.Denied = s.Decisions - s.Admitted
		for _, in := range insts {
			s.RoundTrips += in.cc.roundTrips.Load()
		}
		return s
	}
	// Consumers stop calling when the run ends, shedding what is left in
	// the queues; calls in flight then finish (bounded by cctx).
	cctx, cancel := context.WithTimeout(ctx, cfg.Baseline+5*time.Second)
	defer cancel()
	var cons sync.WaitGroup
	for ii, in := range insts {
		for k := 0; k < baselineConsumers; k++ {
			cons.Add(1)
			go func() {
				defer cons.Done()
				rng := rand.New(rand.NewPCG(cfg.Seed, uint64(ii*baselineConsumers+k)))
				var mine []time.Duration
				var seen, count int64
				for ti := range in.ch {
					if elapsed() >= cfg.Baseline || cctx.Err() != nil {
						continue // the run is over: shed
					}
					t0 := time.Now()
					r, err := in.rl.Allow(cctx, keys[ti], limits[ti])
					d := time.Since(t0)
					if err != nil {
						errs.Add(1)
						continue
					}
					decisions.Add(1)
					if r.Allowed > 0 {
						admitted.Add(1)
					}
					count++
					if count%sampleEvery == 0 {
						seen++
						if len(mine) < latencyCap {
							mine = append(mine, d)
						} else if j := rng.Int64N(seen); j < latencyCap {
							mine[j] = d
						}
					}
				}
				latMu.Lock()
				lat = append(lat, mine...)
				latMu.Unlock()
			}()
		}
	}
	var pacers sync.WaitGroup
	for _, in := range insts {
		pacers.Add(1)
		go func() {
			defer pacers.Done()
			defer close(in.ch)
			due := make([]float64, len(w.Tenants))
			last := elapsed()
			tick := time.NewTicker(tickEvery)
			defer tick.Stop()
			for {
				now := elapsed()
				if now >= cfg.Baseline {
					return
				}
				dt := min(now-last, maxTickGap)
				last = now
				for ti := range due {
					due[ti] += steady.Demand(ti, now) / float64(n) * dt.Seconds()
					cnt := int(due[ti])
					due[ti] -= float64(cnt)
					for range cnt {
						in.offered++
						select {
						case in.ch <- ti:
						default:
							in.shed++
						}
					}
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var progDone chan struct{}
	stopProg := make(chan struct{})
	if prog != nil {
		progDone = make(chan struct{})
		go func() {
			defer close(progDone)
			t := time.NewTicker(prog.every())
			defer t.Stop()
			for {
				select {
				case <-stopProg:
					return
				case <-t.C:
					prog.update(snap())
				}
			}
		}()
	}
	pacers.Wait()
	cons.Wait()
	dur := elapsed()
	cpu, cpuOK := cpuSince(cpu0, be.redisCPU(ctx))
	close(stopProg)
	if prog != nil {
		<-progDone
		prog.done(snap())
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &BaselineResult{
		Name:      baselineName,
		Duration:  dur,
		Decisions: decisions.Load(),
		Admitted:  admitted.Load(),
		Errors:    errs.Load(),
		P50:       percentile(lat, 0.50),
		P99:       percentile(lat, 0.99),
		RedisCPU:  cpu,
		HasCPU:    cpuOK,
	}
	for _, in := range insts {
		res.Offered += in.offered
		res.RoundTrips += in.cc.roundTrips.Load()
		res.Scripts += in.cc.evals.Load()
	}
	res.Shed = res.Offered - res.Decisions - res.Errors
	res.DecisionsPerSec = float64(res.Decisions) / dur.Seconds()
	if res.Decisions > 0 {
		res.RoundTripsPer1k = 1000 * float64(res.RoundTrips) / float64(res.Decisions)
	}
	return res, nil
}
