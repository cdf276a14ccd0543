package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestSparseCountsRequestsOfSeveralTokens: a tenant whose requests of n
// tokens come 3 s apart on an instance, with 2 s leases (1.8 s usable),
// is sparse whatever n (Planner.sparse counts the tokens asked over the
// largest request as requests): each request waits for a lease of its
// own size, one lease call a request, and no token expires. The largest
// request is forgotten after 4 half-lives (2 s), before the next request
// comes, and the plan that sees a request counted its tokens as requests
// before it took the request's size into needMax: requests of 2 tokens
// read as 2 requests in 3 s, not sparse, and made 2 lease calls a request
// and let 3 tokens expire (20 calls and 30 tokens for the 10 requests of
// the steady state, as before the rule); of 3 tokens, 3 calls and 4
// tokens.
func TestSparseCountsRequestsOfSeveralTokens(t *testing.T) {
	for _, n := range []int64{1, 2, 3} {
		lim := quota.Quota{Rate: 2, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: 2 * time.Second}
		r := newRig(Config{}, lim, "sparse")
		var calls int
		var expired int64
		for i := range 20 {
			if i == 10 { // the steady state
				calls, expired = r.calls, r.expired
			}
			// A request that waits for its lease (a cold miss): the
			// plan's urgent call brings it, it spends it, and its miss
			// is taken back (Tenant.Unmiss).
			r.request(n)
			r.plan()
			if ok, _ := r.tokens.TrySpend(n); ok {
				r.missed -= n
			}
			for range int(3 * time.Second / tick) {
				r.now = r.now.Add(tick)
				r.plan()
			}
			r.checkHeld(t)
		}
		if r.st.flags&flagSparse == 0 {
			t.Errorf("requests of %d tokens 3 s apart, 2 s leases: not sparse", n)
		}
		if c, e := r.calls-calls, r.expired-expired; c != 10 || e != 0 {
			t.Errorf("requests of %d tokens 3 s apart, 2 s leases: %d lease calls for 10 requests and %d tokens expired, want 10 and none", n, c, e)
		}
	}
}

// TestHeldBackTenantNotSparse: a busy tenant whose calls are held back
// (a partial grant: its bucket dry) is passed by while its requests miss
// (syncer/quiet.go), so the first plan within the hold may see a few
// tokens asked over seconds, against a large request of before (needMax).
// Counted then, they read as one request in more than a lease's usable
// lifetime: sparse, its lease sized at nothing, and its next miss a cold
// one, waiting for a refill the hold keeps back. Sparseness is not judged
// while calls are held back.
func TestHeldBackTenantNotSparse(t *testing.T) {
	lim := quota.Quota{Rate: 2, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: 2 * time.Second}
	r := newRig(Config{}, lim, "held")
	r.run(2, time.Second, tick, nil) // leased, busy
	r.request(20)                    // a large request: needMax 20
	r.grant = func(want int64) (lease.Grant, bool) {
		return lease.Grant{Granted: min(want, 3), Tokens: 0, Instances: 1}, true // partial: the bucket dry
	}
	r.plan()
	if !r.now.Before(r.st.NotBefore()) {
		t.Fatalf("after a partial grant the tenant's calls are not held back (NotBefore %v, now %v)", r.st.NotBefore(), r.now)
	}
	// Passed by for 2.05 s while 3 one-token requests miss, then planned
	// once within the hold.
	r.now = r.now.Add(2050 * time.Millisecond)
	for range 3 {
		r.request(1)
	}
	if !r.now.Before(r.st.NotBefore()) {
		t.Fatalf("the hold ended before the plan (NotBefore %v): the case needs a longer one", r.st.NotBefore())
	}
	r.plan()
	if r.st.flags&flagSparse != 0 {
		t.Errorf("a busy tenant held back, planned once in its hold with 3 tokens missed against a request of 20 before: sparse (target %d)", r.st.Target())
	}
}
