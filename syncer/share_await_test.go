package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// firstCallAfter plans st every 20 ms from now on, a request short each
// time, for up to 10 s, and returns the first action that calls Redis and
// how long after now it came (false: none came).
func firstCallAfter(p *Planner, st *State, now time.Time) (Action, time.Duration, bool) {
	for at := now.Add(20 * time.Millisecond); at.Before(now.Add(10 * time.Second)); at = at.Add(20 * time.Millisecond) {
		if a := p.Plan(st, shareQuota, at, Input{Urgent: true, Need: 1, Missed: 30}); a.Calls() {
			return a, at.Sub(now), true
		}
	}
	return Action{}, 0, false
}

// refusedAsk returns a scarce tenant's State whose call at now asked for
// a share and got the reply g, which holds none.
func refusedAsk(t *testing.T, p *Planner, now time.Time, g lease.Grant) *State {
	t.Helper()
	st := scarceState(p, now, 300)
	a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30})
	if a.Share != lease.ShareAsk {
		t.Fatalf("scarce tenant's call: %+v, want an ask for a share", a)
	}
	p.Granted(st, shareQuota, now, a.Acquire, g, 0)
	p.Shared(st, shareQuota, a.Share, now, now, g)
	return st
}

// TestRefusedAskOnAnEmptyBucketWaitsForTheNextAsk: an ask refused by a
// reply that granted nothing from an empty bucket (the shares in force
// hold the rate) makes no call for tokens before the ask is due again, a
// quarter period on, and then asks; at most the share's credit wait
// (creditWait) when the period is long. A reply that found tokens in the
// bucket leaves the calls for tokens as they were.
func TestRefusedAskOnAnEmptyBucketWaitsForTheNextAsk(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	// A fair share of 5 a second: its credit spans a quarter of the
	// burst, 25 tokens, in 5 s (creditWait), more than a quarter period.
	empty := lease.Grant{ServerTime: now, Share: 5, Instances: 4}

	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 8 * time.Second, Window: 16 * time.Second}, 1)
	if w := p.creditWait(shareQuota, empty.Share); w != 5*time.Second {
		t.Fatalf("credit wait of a share of 5: %v, want 5s", w)
	}
	a, after, ok := firstCallAfter(p, refusedAsk(t, p, now, empty), now)
	if !ok {
		t.Fatal("no call within 10 s of the refusal")
	}
	if after < 2*time.Second || after > 3*time.Second || a.Share != lease.ShareAsk {
		t.Errorf("first call %v after the refusal (%+v), want the ask again, a quarter of the period (2 s) on", after, a)
	}

	long := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: time.Hour, Window: 2 * time.Hour}, 1)
	most := long.creditWait(shareQuota, empty.Share)
	_, after, ok = firstCallAfter(long, refusedAsk(t, long, now, empty), now)
	if !ok || after < most || after > most+time.Second {
		t.Errorf("period of an hour: first call %v after the refusal (found: %v), want within a second after the credit wait %v", after, ok, most)
	}

	tokens := empty
	tokens.Tokens = 5
	_, after, ok = firstCallAfter(p, refusedAsk(t, p, now, tokens), now)
	if !ok || after >= time.Second {
		t.Errorf("refused with 5 tokens in the bucket: first call %v after it (found: %v), want within a second", after, ok)
	}
}
