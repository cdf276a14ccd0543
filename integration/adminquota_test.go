package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// TestSetQuotaUnderLoad runs one tenant on 4 limiters at twice its rate,
// then lowers its quota with SetQuota from a fifth limiter (an admin
// process that serves no traffic). Every instance must apply the new quota
// within one refresh interval plus scheduling slack (its decisions say so),
// and from the change on the admitted count must stay within
//
//	Burst_new + Rate_new * elapsed_since_change + slack,
//
// where slack is what the instances could hold, leased before the change:
// each holds at most its lease target plus the batch about to expire that
// the target no longer counts, 2 * MaxLease_old, so 4 * 2 * MaxLease_old.
// Then DeleteQuota brings every instance back to the configured quota.
func TestSetQuotaUnderLoad(t *testing.T) {
	srv := redistest.Shared(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		instances  = 4
		goroutines = 8
		interval   = leasequota.DefaultRefreshInterval
		// Scheduling slack on top of one interval: one syncer tick (R/4),
		// the jitter (R/10), the call itself and a loaded machine (-race,
		// other packages).
		applySlack = 150 * time.Millisecond
	)
	tenant := "hot{tenant}\n"
	oldQ := leasequota.Quota{Rate: 2000, Burst: 1000, MaxLease: 100}
	newQ := leasequota.Quota{Rate: 500, Burst: 200, MaxLease: 50}
	admin := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()

	newLimiter := func() *leasequota.Limiter {
		c := srv.Client()
		t.Cleanup(func() { c.Close() })
		// FailClosed: every admission comes from a lease (the bound is exact).
		l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(prefix), leasequota.WithDefaultQuota(oldQ),
			leasequota.WithFailureMode(leasequota.FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	limiters := make([]*leasequota.Limiter, instances)
	for i := range limiters {
		limiters[i] = newLimiter()
	}
	ctl := newLimiter()
	defer ctl.Close(ctx)

	var (
		changed   atomic.Bool  // SetQuota has returned
		changedAt atomic.Int64 // local unix ns when it returned
		after     atomic.Int64 // admitted after the change
		stop      atomic.Bool
		// seen[i]: local unix ns of instance i's first decision carrying
		// the new quota after the change.
		seen [instances]atomic.Int64
	)
	demand := 2 * oldQ.Rate // tokens/s over all goroutines
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := g % instances
			l := limiters[i]
			began := time.Now()
			var sent int64
			for !stop.Load() {
				due := int64(time.Since(began).Seconds() * demand / goroutines)
				for ; sent < due; sent++ {
					ch := changed.Load()
					d := l.AllowN(ctx, tenant, 1)
					if ch {
						if d.Allowed {
							after.Add(1)
						}
						if d.Quota.Rate == newQ.Rate && d.Quota.Burst == newQ.Burst && seen[i].Load() == 0 {
							seen[i].CompareAndSwap(0, time.Now().UnixNano())
						}
					}
				}
				time.Sleep(time.Millisecond) // pacing the load
			}
		}()
	}

	time.Sleep(time.Second) // let the load run on the old quota (pacing, not waiting for a condition)
	start, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetQuota(ctx, tenant, newQ); err != nil {
		t.Fatal(err)
	}
	setAt := time.Now()
	changedAt.Store(setAt.UnixNano())
	changed.Store(true)

	// Every instance's Tenant(...).Quota shows the new quota within an interval.
	deadline := setAt.Add(5 * time.Second)
	var applied [instances]time.Duration
	for i, l := range limiters {
		for {
			info, _ := l.Tenant(tenant)
			if info.Quota.Rate == newQ.Rate && info.Quota.Burst == newQ.Burst && info.Quota.MaxLease == newQ.MaxLease {
				applied[i] = time.Since(setAt)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %d: quota still %+v 5s after SetQuota", i, info.Quota)
			}
			time.Sleep(time.Millisecond) // polling pace
		}
	}
	time.Sleep(3 * time.Second) // load on the new quota (pacing)
	stop.Store(true)
	wg.Wait()
	end, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}

	for i := range limiters {
		first := seen[i].Load()
		if first == 0 {
			t.Errorf("instance %d: no decision carried the new quota", i)
			continue
		}
		lag := time.Duration(first - changedAt.Load())
		t.Logf("instance %d: Tenant().Quota new after %v (polled), first decision with it after %v", i, applied[i], lag)
		if lag > interval+applySlack || applied[i] > interval+applySlack {
			t.Errorf("instance %d: new quota applied after %v / %v, want within %v + %v", i, applied[i], lag, interval, applySlack)
		}
	}
	elapsed := end.Sub(start).Seconds()
	slack := float64(instances * 2 * oldQ.MaxLease)
	bound := float64(newQ.Burst) + newQ.Rate*elapsed + slack
	got := float64(after.Load())
	t.Logf("admitted %.0f since the change, %.3fs: bound %.0f = %d + %.0f*%.3f + slack %.0f (without slack %.0f)",
		got, elapsed, bound, newQ.Burst, newQ.Rate, elapsed, slack, bound-slack)
	if got > bound {
		t.Errorf("admitted %.0f since the change > bound %.1f", got, bound)
	}
	if floor := 0.8 * newQ.Rate * elapsed; got < floor {
		t.Errorf("admitted %.0f since the change < %.0f: the new rate is not being used", got, floor)
	}

	// DeleteQuota: every instance returns to the configured quota.
	if q, ok, err := ctl.GetQuota(ctx, tenant); err != nil || !ok || q != newQ {
		t.Fatalf("GetQuota = %+v, %v, %v; want %+v", q, ok, err, newQ)
	}
	if err := ctl.DeleteQuota(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ctl.GetQuota(ctx, tenant); ok || err != nil {
		t.Fatalf("GetQuota after DeleteQuota: %v, %v", ok, err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for i, l := range limiters {
		for {
			l.Allow(tenant) // keep the tenant active here
			info, _ := l.Tenant(tenant)
			if info.Quota.Rate == oldQ.Rate && info.Quota.Burst == oldQ.Burst {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %d: quota still %+v after DeleteQuota", i, info.Quota)
			}
			time.Sleep(time.Millisecond) // polling pace
		}
	}
	for _, l := range limiters {
		if err := l.Close(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestQuotaAdminAcrossInstances sets quotas of hostile tenant names on one
// instance and reads them on another; invalid quotas are rejected.
func TestQuotaAdminAcrossInstances(t *testing.T) {
	srv := redistest.Shared(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	var ls [2]*leasequota.Limiter
	for i := range ls {
		c := srv.Client()
		defer c.Close()
		l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t).With("limiter", i)), leasequota.WithKeyPrefix(prefix),
			leasequota.WithMaxWait(200*time.Millisecond),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-6, Burst: 1}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(ctx)
		ls[i] = l
	}
	names := []string{"", "{", "}", "{}", "a}b{c", "\n", "\x00", "\xff\xfe", strings.Repeat("{}", 1000), "t:x", "h:x"}
	for i, name := range names {
		q := leasequota.Quota{Rate: float64(i + 1), Burst: int64(10 + i)}
		if err := ls[0].SetQuota(ctx, name, q); err != nil {
			t.Fatalf("SetQuota(%q): %v", name, err)
		}
	}
	for i, name := range names {
		want := leasequota.Quota{Rate: float64(i + 1), Burst: int64(10 + i)}
		got, ok, err := ls[1].GetQuota(ctx, name)
		if err != nil || !ok || got != want {
			t.Errorf("GetQuota(%q) on the other instance = %+v, %v, %v; want %+v", name, got, ok, err, want)
		}
		// The other instance applies it on its first lease call.
		if d := ls[1].AllowN(ctx, name, 1); !d.Allowed || d.Quota.Rate != want.Rate || d.Quota.Burst != want.Burst {
			t.Errorf("AllowN(%q) on the other instance = %+v, want admitted under %+v", name, d, want)
		}
	}
	for _, bad := range []leasequota.Quota{{Rate: 0, Burst: 1}, {Rate: 1, Burst: -1}, {Rate: 1, Burst: 1, LeaseTTL: time.Nanosecond}} {
		if err := ls[0].SetQuota(ctx, "bad", bad); !errors.Is(err, leasequota.ErrInvalidQuota) {
			t.Errorf("SetQuota(%+v) = %v, want ErrInvalidQuota", bad, err)
		}
	}
	if _, ok, _ := ls[1].GetQuota(ctx, "bad"); ok {
		t.Error("an invalid quota was stored")
	}
	for _, name := range names {
		if err := ls[1].DeleteQuota(ctx, name); err != nil {
			t.Errorf("DeleteQuota(%q): %v", name, err)
		}
		if _, ok, err := ls[0].GetQuota(ctx, name); ok || err != nil {
			t.Errorf("GetQuota(%q) after DeleteQuota = %v, %v", name, ok, err)
		}
	}
}
