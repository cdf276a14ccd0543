package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
)

// TestLapsedColdDenialIsAColdStart: a tenant the syncer keeps no lease
// for (its demand decayed to nothing: TenantInfo.Lease 0, syncer flagIdle)
// stays cold while the acquire a request's miss sent is out, even when
// that plan sizes a lease again (a burst: too many requests to be sparse).
// A request whose wait (WithColdStartWait, 100 ms) ends before the call
// answers (150 ms) is denied as a first request is, ReasonColdStart, and
// a request behind it waits for that lease as it does and is admitted
// when it comes. Before, the plan cleared the tenant's idle flag as it
// sized the lease, before the call went out: the first was denied
// ReasonExhausted with its bucket nearly full (the quota spent, as Stats
// counted it), and the next, a warm miss, was denied at once, exhausted,
// 50 ms before the lease it would have spent came. (A sparse tenant,
// whose requests come a lease lifetime apart, does not tell: its plan
// sizes no lease, target 0, which keeps it cold anyway.)
func TestLapsedColdDenialIsAColdStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const call = 150 * time.Millisecond
		l := newLimiter(t, slowAcquires(call),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}), leasequota.WithRedisTimeout(time.Second))
		ctx := context.Background()
		const name = "bursty"
		// A first request: cold, denied before its lease comes; the lease
		// lands after.
		if d := l.AllowN(ctx, name, 1); d.Allowed || d.Reason != leasequota.ReasonColdStart {
			t.Fatalf("first request: %v %v, want denied %v", d.Allowed, d.Reason, leasequota.ReasonColdStart)
		}
		// Quiet until the syncer keeps no lease for the tenant, the
		// tokens it holds still unexpired. Steps off the syncer's ticks
		// (multiples of a quarter interval), each settled (synctest.Wait),
		// from after the first lease came.
		time.Sleep(call + 2*time.Millisecond)
		var info leasequota.TenantInfo
		for start := time.Now(); ; {
			synctest.Wait()
			info, _ = l.Tenant(name)
			if info.Lease == 0 && info.Tokens > 0 {
				break
			}
			if time.Since(start) > leasequota.DefaultLeaseTTL {
				t.Fatalf("the tenant's lease was not sized at nothing with tokens held (%+v): the test did not test", info)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("idle with %d tokens held", info.Tokens)
		// The burst: the held tokens, then a miss, cold.
		for i := range info.Tokens {
			if d := l.AllowN(ctx, name, 1); d.Reason != leasequota.ReasonLeased {
				t.Fatalf("burst request %d of %d held tokens: %v %v", i, info.Tokens, d.Allowed, d.Reason)
			}
		}
		sent := time.Now()
		d := l.AllowN(ctx, name, 1)
		if d.Allowed || d.Reason != leasequota.ReasonColdStart || time.Since(sent) >= call {
			t.Errorf("the miss, its wait ended %v after it, before its %v lease call answered: %v %v, want denied %v",
				time.Since(sent), call, d.Allowed, d.Reason, leasequota.ReasonColdStart)
		}
		// The next request, while that call is out: it waits for the lease
		// and spends it.
		asked := time.Since(sent)
		d = l.AllowN(ctx, name, 1)
		if !d.Allowed || d.Reason != leasequota.ReasonColdStart {
			t.Errorf("the request after, %v after the miss, the lease call still out: %v %v %v later, want admitted %v when the lease came",
				asked, d.Allowed, d.Reason, time.Since(sent)-asked, leasequota.ReasonColdStart)
		}
		time.Sleep(time.Until(sent.Add(call + time.Millisecond)))
		if info, _ := l.Tenant(name); info.Lease == 0 {
			t.Errorf("the miss's plan sized no lease (%+v): the test did not test", info)
		}
		if got := l.Stats().Decisions[leasequota.ReasonExhausted]; got.Denied != 0 {
			t.Errorf("Stats: %d denials counted exhausted, of a tenant that spent %d of its burst of 100", got.Denied, info.Tokens)
		}
	})
}
