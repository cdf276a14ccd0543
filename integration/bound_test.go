package integration

import (
	"context"
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
)

// scriptCalls returns the EVAL and EVALSHA calls the server has served.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		// cmdstat_evalsha:calls=12,usec=...
		fields := strings.SplitN(line[strings.IndexByte(line, ':')+1:], ",", 2)
		n, err := strconv.ParseInt(strings.TrimPrefix(fields[0], "calls="), 10, 64)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		total += n
	}
	return total
}

// TestGlobalBound runs 4 limiters, each with its own go-redis client, on
// 20 tenants of different quotas, with 32 goroutines asking for 3x each
// tenant's rate for 5 s. For every tenant the admitted count must stay
// within Burst + Rate*elapsed (elapsed measured on the Redis clock, from
// before the first request to after the last) and reach utilizationFloor of it (90 % on a quiet machine).
//
// "rollout" is the same fleet halfway through a rollout of the default
// lease lifetime of 2 s: limiters 0 and 2 keep the previous default, 1 s
// (WithLeaseTTL), and so send Redis a registry window half as long. The
// bound must hold as exactly, and neither half may starve the other:
// each limiter admits at least half of an even share of the admissions.
func TestGlobalBound(t *testing.T) {
	t.Run("default", func(t *testing.T) { testGlobalBound(t, false) })
	t.Run("rollout", func(t *testing.T) { testGlobalBound(t, true) })
}

func testGlobalBound(t *testing.T, rollout bool) {
	srv := redistest.Shared(t) // before the leak check: the harness lives for the package
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		instances  = 4
		tenants    = 20
		goroutines = 32
		overDemand = 3.0
	)
	duration := 5 * time.Second
	admin := redistest.Client(t)
	prefix := redistest.Prefix(t)

	// Rates from 500 to 5,250 tokens/s; bursts half a second's worth, so
	// that a syncer delayed by a loaded machine (the race detector, other
	// test packages) does not let the bucket overflow.
	quota := stepQuota(500, 250, 0.5)
	names := tenantNames(tenants)
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}

	limiters := make([]*leasequota.Limiter, instances)
	for i := range limiters {
		c := srv.Client()
		defer c.Close()
		// FailClosed: every admission comes from a lease, so the bound
		// is exact even if a lease call times out on a loaded machine.
		opts := []leasequota.Option{leasequota.WithLogger(redistest.Logger(t).With("limiter", i)), leasequota.WithKeyPrefix(prefix),
			leasequota.WithFailureMode(leasequota.FailClosed),
			leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quota(index[tenant]) })}
		if rollout && i%2 == 0 {
			opts = append(opts, leasequota.WithLeaseTTL(time.Second)) // the previous default
		}
		l, err := leasequota.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = l
	}

	callsBefore := scriptCalls(t, admin)
	start, err := admin.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}

	var admitted [tenants]atomic.Int64
	var byLimiter [instances]atomic.Int64
	var decisions atomic.Int64
	probe := startStallProbe()
	defer probe.Stop()
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine serves every tenant at 3x rate / goroutines,
			// paced by a local schedule: request k of tenant i is due at
			// k / (3 * rate / goroutines) seconds.
			l, admittedHere := limiters[g%instances], &byLimiter[g%instances]
			began := time.Now()
			sent := make([]int64, tenants)
			for time.Now().Before(deadline) {
				el := time.Since(began).Seconds()
				for i := range names {
					due := int64(el * overDemand * quota(i).Rate / goroutines)
					for ; sent[i] < due; sent[i]++ {
						decisions.Add(1)
						if l.Allow(names[i]) {
							admitted[i].Add(1)
							admittedHere.Add(1)
						}
					}
				}
				time.Sleep(time.Millisecond) // pacing the load, not waiting for a condition
			}
		}()
	}
	wg.Wait()
	probe.Stop()
	t.Log(probe)
	floor := utilizationFloor(probe, 0.8)
	end, err := admin.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := scriptCalls(t, admin) - callsBefore
	elapsed := end.Sub(start).Seconds()

	for i := range names {
		q := quota(i)
		bound := float64(q.Burst) + q.Rate*elapsed
		got := float64(admitted[i].Load())
		if got > bound+1e-9*bound {
			t.Errorf("%s: admitted %.0f > bound %.1f (burst %d + rate %.0f * %.3fs)", names[i], got, bound, q.Burst, q.Rate, elapsed)
		}
		if got < floor*bound {
			t.Errorf("%s: admitted %.0f < %.0f%% of bound %.1f (utilizationFloor: on what the machine delivered to this process)", names[i], got, 100*floor, bound)
		}
		t.Logf("%s: admitted %.0f of bound %.1f (%.1f%%)", names[i], got, bound, 100*got/bound)
	}
	var all int64
	for i := range byLimiter {
		all += byLimiter[i].Load()
	}
	for i := range byLimiter {
		share := float64(byLimiter[i].Load()) / float64(max(all, 1))
		t.Logf("limiter %d: %.1f%% of the admissions", i, 100*share)
		if share < 0.5/instances {
			t.Errorf("limiter %d admitted %.1f%% of the admissions, want at least half of an even share (%.1f%%)", i, 100*share, 50.0/instances)
		}
	}
	perK := float64(calls) / float64(decisions.Load()) * 1000
	t.Logf("script calls: %d for %d decisions: %.2f per 1,000 decisions", calls, decisions.Load(), perK)
	if perK > 10 {
		t.Errorf("script calls per 1,000 decisions = %.2f, want <= 10", perK)
	}
	for _, l := range limiters {
		if err := l.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
}
