package syncer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// queueStore is Redis's one thread as a queue: every call of n commands
// occupies the server for n × perCall, after the calls before it, and is
// answered (applied to the in-process store) when the server is through
// with it; a call whose context ends first fails, as a timed-out call
// does, having cost the server its time all the same. It runs in a
// synctest bubble, so the waits are on the fake clock.
type queueStore struct {
	lease.Store
	q *serverQueue
}

type serverQueue struct {
	perCall time.Duration

	mu       sync.Mutex
	freeAt   time.Time // when the server has run every call queued so far; guarded by mu
	busy     time.Duration
	commands int
	timeouts int
}

// serve queues n commands and waits for them, or for ctx.
func (q *serverQueue) serve(ctx context.Context, n int) error {
	q.mu.Lock()
	start := time.Now()
	if q.freeAt.After(start) {
		start = q.freeAt
	}
	q.freeAt = start.Add(time.Duration(n) * q.perCall)
	q.busy += time.Duration(n) * q.perCall
	q.commands += n
	done := q.freeAt
	q.mu.Unlock()
	t := time.NewTimer(time.Until(done))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		q.timeouts += n
		q.mu.Unlock()
		return ctx.Err()
	}
}

func (s *queueStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if err := s.q.serve(ctx, len(reqs)); err != nil {
		return results, err
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

func (s *queueStore) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	if err := s.q.serve(ctx, len(reqs)); err != nil {
		res := make([]lease.ReleaseResult, len(reqs))
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	return s.Store.ReleaseMany(ctx, reqs)
}

// TestSaturatedRedisServesItsCapacity: four instances share 1,500
// over-demanded tenants (6,000 pairs, each wanting a call about every
// second) on a Redis that runs a call in 100 µs: 60 % of its thread at
// the steady rate, but the start, when every pair asks at once, queues
// seconds of work behind 50 ms deadlines. An instance must not keep
// offering what Redis cannot run in time: after the start, calls are
// answered within their deadline (few time out), and the tenants get
// most of what Redis can lease, instead of a fleet that times out,
// retries and stays in its failure mode while Redis is up.
func TestSaturatedRedisServesItsCapacity(t *testing.T) {
	if raceEnabled {
		// 80 s of the race detector's make unit (2.5 s without it), for
		// goroutines the other tests of this package run under it too.
		t.Skip("a long model: make simulation runs it without the race detector")
	}
	// Parallel: the fake clock makes it indifferent to sharing the
	// machine with the simulations.
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const (
			instances = 4
			tenants   = 1500
			interval  = 100 * time.Millisecond
			run       = 20 * time.Second
			warmup    = 5 * time.Second
		)
		q := &serverQueue{perCall: 100 * time.Microsecond}
		mem := memstore.New()
		lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var ss []*syncer.Syncer
		var all [][]*syncer.Tenant
		for i := range instances {
			view, err := mem.Instance(fmt.Sprintf("i%d", i), 2*lim.LeaseTTL+interval)
			if err != nil {
				t.Fatal(err)
			}
			s := syncer.New(&queueStore{Store: view, q: q}, syncer.Options{
				Planner:     syncer.NewPlanner(syncer.Config{Interval: interval}, uint64(i+1)),
				CallTimeout: interval / 2,
				Instances:   instances,
			})
			var ts []*syncer.Tenant
			for k := range tenants {
				tn, err := s.Track(fmt.Sprintf("t%04d", k), lim)
				if err != nil {
					t.Fatal(err)
				}
				ts = append(ts, tn)
			}
			ss = append(ss, s)
			all = append(all, ts)
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Run(ctx)
			}()
		}
		// Demand: every pair asks for 3x its share of the rate, a request
		// of one token every 4/300 s (spent from the lease or noted as a
		// miss, as AllowN does).
		spent := make([]int64, instances)
		var afterWarmup []int64
		var errsAtWarmup int64
		var busyAtWarmup time.Duration
		step := 4 * time.Second / 300
		start := time.Now()
		for at := time.Duration(0); at < run; at += step {
			time.Sleep(step)
			for i, ts := range all {
				for _, tn := range ts {
					if ok, _ := tn.Spend(1); ok {
						spent[i]++
					} else {
						ss[i].NoteMiss(tn, 1)
					}
				}
			}
			if afterWarmup == nil && time.Since(start) >= warmup {
				afterWarmup = append([]int64(nil), spent...)
				for _, s := range ss {
					errsAtWarmup += s.Stats().Errors
				}
				q.mu.Lock()
				busyAtWarmup = q.busy
				q.mu.Unlock()
			}
		}
		cancel()
		wg.Wait()
		var admitted, errs, calls int64
		for i, s := range ss {
			admitted += spent[i] - afterWarmup[i]
			errs += s.Stats().Errors
			calls += s.Stats().Calls
			s.Close()
		}
		steady := (run - warmup).Seconds()
		rate := float64(admitted) / steady / (tenants * lim.Rate)
		q.mu.Lock()
		busy := (q.busy - busyAtWarmup).Seconds() / steady
		q.mu.Unlock()
		t.Logf("after the first %v: %.0f%% of the tenants' rate admitted; Redis busy %.0f%%; failed lease calls %d (%d before), %d round trips in all",
			warmup, 100*rate, 100*busy, errs-errsAtWarmup, errsAtWarmup, calls)
		q.mu.Lock()
		t.Logf("the whole run: Redis ran %.0f commands/s (%.2f per pair and second; a starved pair needs about 1), %.0f of them for calls that timed out",
			float64(q.commands)/run.Seconds(), float64(q.commands)/run.Seconds()/(instances*tenants), float64(q.timeouts)/run.Seconds())
		q.mu.Unlock()
		// Before the call budget, the same run admitted 34 % of the rate,
		// and 390,103 lease calls failed after the start (4.3 per pair and
		// second): every call waited in Redis's queue past its deadline.
		// With a window cut only by timeouts, 50-63 % admitted and 1.1-2.0
		// failed calls per pair and second over runs (the goroutines'
		// interleaving, which the bubble does not fix, varies them). With
		// the window cut by slow replies too (congestedAfter), and not
		// started over when the breaker closes: 98-100 % admitted and 0 to
		// 192 failed calls after the start in 5 runs, with and without the
		// race detector (0.002 per pair and second).
		pairSeconds := steady * instances * tenants
		if got := errs - errsAtWarmup; float64(got) > 0.05*pairSeconds {
			t.Errorf("%d lease calls failed after the start, %.3f per pair and second (want at most 0.05): the instances keep offering what Redis cannot run in time",
				got, float64(got)/pairSeconds)
		}
		if rate < 0.85 {
			t.Errorf("%.0f%% of the tenants' rate admitted after the start, want at least 85%%", 100*rate)
		}
	})
}
