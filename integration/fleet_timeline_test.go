package integration

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// fleetTimeline makes BenchmarkFleet log, every so often while the load
// runs, what Redis and the limiters did since the line before: where a
// run's Redis CPU and admissions go between its start and its steady
// state (docs/performance.md, "A fleet's start and its steady state").
var fleetTimeline = flag.Duration("fleet.timeline", 0,
	"BenchmarkFleet logs, this often while the load runs, Redis's CPU, the tenant scripts, the requests admitted and the lease calls failed since the line before (0: no timeline)")

// timeline samples a fleet run every tick: Redis's CPU (INFO cpu), its
// tenant scripts (one EXISTS of the override key each, as the run's
// tenant-scripts metric counts them), the requests admitted and the
// failed lease calls of the limiters (Stats.Errors). Its lines wait in
// memory and are logged once the run stops it, so that logging takes
// nothing from the load and the lines come out together.
type timeline struct {
	stop chan struct{}
	done sync.WaitGroup
	// lines and err are written by the sampling goroutine until done.
	lines []string
	err   error // the INFO that failed, ending the sampling
}

// startTimeline starts sampling every tick, admitted being the run's
// count of admitted requests.
func startTimeline(tick time.Duration, admin *redis.Client, lims []*leasequota.Limiter, admitted *atomic.Int64) *timeline {
	tl := &timeline{stop: make(chan struct{})}
	cpu0, exists0, err := redisCounters(admin)
	if err != nil {
		tl.err = err
		return tl
	}
	tl.done.Add(1)
	go func() {
		defer tl.done.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		start := time.Now()
		lastCPU, lastExists := cpu0, exists0
		var lastAdmitted, lastErrors int64
		for {
			select {
			case <-tl.stop:
				return
			case <-t.C:
			}
			at := time.Since(start)
			cpu, exists, err := redisCounters(admin)
			if err != nil {
				tl.err = err
				return
			}
			adm := admitted.Load()
			var errs int64
			for _, l := range lims {
				errs += l.Stats().Errors
			}
			tl.lines = append(tl.lines, fmt.Sprintf("%6.2fs  Redis CPU %5.0f ms  tenant scripts %6d  admitted %7d  failed lease calls %5d",
				at.Seconds(), float64(cpu-lastCPU)/float64(time.Millisecond), exists-lastExists, adm-lastAdmitted, errs-lastErrors))
			lastCPU, lastExists, lastAdmitted, lastErrors = cpu, exists, adm, errs
		}
	}()
	return tl
}

// end stops the sampling and logs the lines, each the counts since the
// line before, at the time since the load started.
func (tl *timeline) end(tb testing.TB) {
	tb.Helper()
	if tl == nil {
		return
	}
	close(tl.stop)
	tl.done.Wait()
	if tl.err != nil {
		tb.Errorf("fleet timeline: %v", tl.err)
	}
	tb.Logf("the load's timeline, each line the counts since the one before:\n\t%s", strings.Join(tl.lines, "\n\t"))
}

// redisCounters reads Redis's CPU (user + sys) and its EXISTS calls in
// one INFO, returning an error rather than failing the test: it runs
// beside the test's goroutine.
func redisCounters(c *redis.Client) (cpu time.Duration, exists int64, err error) {
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	seconds, err := infoFieldsIn(info, "used_cpu_user", "used_cpu_sys")
	if err != nil {
		return 0, 0, fmt.Errorf("INFO cpu %w", err)
	}
	if exists, err = commandCallsIn(info, "exists"); err != nil {
		return 0, 0, err
	}
	return time.Duration(seconds * float64(time.Second)), exists, nil
}

// TestRedisCountersCountExists holds redisCounters, the timeline's read,
// to what the server ran: two EXISTS are two more, and the CPU does not
// go back.
func TestRedisCountersCountExists(t *testing.T) {
	c := redistest.StartServer(t).Client()
	defer c.Close()
	ctx := context.Background()
	cpu0, n0, err := redisCounters(c)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Exists(ctx, redistest.Prefix(t)+"x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	cpu1, n1, err := redisCounters(c)
	if err != nil {
		t.Fatal(err)
	}
	if n1-n0 != 2 {
		t.Errorf("EXISTS counted %d more after two, want 2", n1-n0)
	}
	if cpu1 < cpu0 || cpu0 <= 0 {
		t.Errorf("Redis CPU read %v, then %v", cpu0, cpu1)
	}
}
