package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// heldReplies is a Store whose acquires, while armed, reach the store
// and are answered there, but whose replies are held until release: a
// reply slow on its way back, its call run before what happens meanwhile.
type heldReplies struct {
	lease.Store
	armed   chan struct{} // closed: hold the next acquire's reply
	held    chan struct{} // closed once a reply is held
	release chan struct{} // closed: let the held reply go
}

func (h *heldReplies) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	res, err := h.Store.AcquireMany(ctx, reqs, results)
	select {
	case <-h.armed:
		h.armed = make(chan struct{}) // once
		close(h.held)
		<-h.release
	default:
	}
	return res, err
}

// TestQuotaCheckRoundRereadsLockedTenant: the round that finds the quota
// version moved plans every active tenant with a re-read, but skips a
// tenant whose lock is taken, here by a refill whose call Redis ran
// before the quota changed and whose reply comes after that round. The
// reply brings the old quota (no override), and nothing asked the tenant
// to read again: starved at 0.01 tokens a second, its rate raised to
// 1,000 by an override, it stayed held back for the old rate's refill,
// nothing admitted for a minute, where a change applies within a poll and
// two rounds (docs/design.md, "Quotas set at run time").
func TestQuotaCheckRoundRereadsLockedTenant(t *testing.T) {
	now, advance, _, mine, other := MemstorePair(t)
	ctx := context.Background()
	store := &heldReplies{Store: mine, armed: make(chan struct{}), held: make(chan struct{}), release: make(chan struct{})}
	s := New(store, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now})
	t.Cleanup(s.Close)
	q := quota.Quota{Rate: 0.01, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second}
	tn, err := s.Track("t", q)
	if err != nil {
		t.Fatal(err)
	}
	// The first reads of the quota version (the first one known counts
	// as a change), and a first lease.
	tn.NoteMiss(1)
	for range 2 {
		s.Tick(ctx)
		s.Wait()
		advance(50 * time.Millisecond)
	}
	// Another instance drains the bucket, and the tenant spends its
	// lease.
	if _, err := other.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: quota.Bucket(q), Want: 100, Demand: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		if ok, _ := tn.Spend(1); !ok {
			break
		}
	}
	if tn.Dormant() || !tn.flag(flagLeased) {
		t.Fatal("no first lease")
	}
	advance(time.Millisecond)
	// A refill's call runs on the dry bucket; its reply is held.
	close(store.armed)
	tn.NoteMiss(1)
	done := s.Refill(ctx, tn, 1)
	select {
	case <-store.held:
	case r := <-done:
		t.Fatalf("refill ended without holding a call: %v (calls %d)", r.Err, s.calls.Load())
	}
	// The quota is raised meanwhile; a poll reads the version...
	if _, err := other.SetOverride(ctx, "t", quota.Bucket(q), lease.Override{Rate: 1000, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	s.Tick(ctx)
	s.Wait()
	advance(25 * time.Millisecond)
	// ...and the next tick's round is the quota check, the tenant locked.
	s.Tick(ctx)
	close(store.release)
	if r := <-done; r.Err != nil {
		t.Fatalf("refill: %v", r.Err)
	}
	start := now()
	for i := 0; ; i++ { // a request each tick, missing until admitted
		if i == 40*60 {
			t.Fatalf("no request admitted in the minute after the rate went from 0.01 to 1,000 a second (rate in force %v)", tn.Limits().Rate)
		}
		advance(25 * time.Millisecond)
		if ok, _ := tn.Spend(1); ok {
			if d := now().Sub(start); d > time.Second {
				t.Errorf("the first request admitted %v after the quota check round, want within a second", d)
			}
			break
		}
		s.NoteMiss(tn, 1)
		s.Tick(ctx)
		s.Urgent(ctx)
		s.Wait()
	}
	if r := tn.Limits().Rate; r != 1000 {
		t.Errorf("rate in force %v, want the override's 1000", r)
	}
}
