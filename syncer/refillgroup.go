package syncer

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/telemetry"
)

// refillGroupMax is the most refills one call carries (refillGroups).
const refillGroupMax = 64

// refillGroups gathers the urgent refills of one node that wait for a
// call slot (maxInFlight) into one call: the first refill to find no
// group open opens one and waits for a slot, the refills that come
// meanwhile join it, and when the slot is free the group closes and its
// requests go in one AcquireMany, whose results each refill then applies
// as its own. A refill that finds a slot free goes at once, alone, as
// before groups.
//
// Why: each refill was a call of its own. When a fleet starts, or comes
// back, with thousands of tenants whose first requests wait for a lease,
// those calls queued for the node's slots one after the other, and each
// paid a whole call's cost in Redis (the dispatch, the script's prologue,
// TIME, the reply) for one tenant: BenchmarkFleet at 32 x 2,000 with
// -fleet.coldasync served 118 tenants in its first second. Gathered, the
// refills that waited share calls, as a round's tenants do (the lease
// client's batches).
type refillGroups struct {
	mu sync.Mutex
	// open is the group that refills join, whose first refill waits for
	// a slot; nil when none does. Guarded by mu.
	open *refillGroup
}

// refillGroup is the requests of refills gathered for one call.
type refillGroup struct {
	// reqs grows under refillGroups.mu while the group is open, and is
	// read only by its sender once it is closed.
	reqs []lease.Request
	// results are reqs' outcomes, written by the sender before done is
	// closed.
	results []lease.Result
	done    chan struct{}
}

// refillCall makes the lease call of a refill, req, to node, whose call
// budget has room for it, gathered with the node's other refills that
// wait for a slot (refillGroups). It returns req's result (a failure of
// the whole call in Err, as call returns it) and whether this refill
// sent the call: a refill that joined another's group did not, and the
// call the breaker refused was not sent either.
func (s *Syncer) refillCall(ctx context.Context, node *redisNode, req lease.Request) (lease.Result, bool) {
	gs := &node.refills
	gs.mu.Lock()
	if g := gs.open; g != nil && len(g.reqs) < refillGroupMax {
		i := len(g.reqs)
		g.reqs = append(g.reqs, req)
		gs.mu.Unlock()
		// The sender's call is bounded by its slot's wait, which calls
		// answered or timed out end, and its deadline.
		<-g.done
		return g.results[i], false
	}
	g := &refillGroup{reqs: []lease.Request{req}, done: make(chan struct{})}
	// A slot free goes to this refill alone, taken under the lock so that
	// no other refill joins a group whose sender needs no wait: opened
	// before the try, a group gathered the refills that came between,
	// and four first leases that each found a slot free went as one call
	// (TestMaxTenantsCountsTenantsWithARefillInFlight hung beside two
	// busy loops, its store waiting for four calls).
	free := node.sem.TryAcquire(1)
	if !free {
		gs.open = g
	}
	gs.mu.Unlock()
	defer close(g.done)
	if !free {
		// No slot free: wait for one, gathering. The refills that join
		// took their room in the budget (roomFor) as this one did: the
		// call gives it back for all of them. Once the slot is had, the
		// group closes and its size is the call's.
		closeGroup := func() int {
			gs.mu.Lock()
			defer gs.mu.Unlock()
			if gs.open == g {
				gs.open = nil
			}
			return len(g.reqs)
		}
		if err := s.waitSlot(ctx, node, closeGroup); err != nil {
			g.answer(nil, err)
			return g.results[0], false
		}
	}
	reqs := g.reqs
	res, err := s.callHeld(ctx, telemetry.OpAcquire, node, len(reqs), 0, func(ctx context.Context) ([]lease.Result, error) {
		res, err := s.client.AcquireMany(ctx, reqs, nil)
		if len(res) != len(reqs) {
			return nil, fmt.Errorf("%w: the store answered %d acquires with %d results (batch error: %v)", lease.ErrBadReply, len(reqs), len(res), err)
		}
		return res, groupFailure(res)
	})
	node.sem.Release(1)
	g.answer(res, err)
	return g.results[0], !refused(err)
}

// answer sets g's results: res, one a request, or err for each when the
// call failed as a whole.
func (g *refillGroup) answer(res []lease.Result, err error) {
	g.results = make([]lease.Result, len(g.reqs))
	for i := range g.results {
		if err != nil {
			g.results[i].Err = err
		} else {
			g.results[i] = res[i]
		}
	}
}

// groupFailure is the failure of a group's call as a whole: the error of
// its first result when every result's error is one (wholeFailure), as a
// refill alone fails; nil otherwise.
func groupFailure(res []lease.Result) error {
	for _, r := range res {
		if wholeFailure(r.Err) == nil {
			return nil
		}
	}
	if len(res) == 0 {
		return nil
	}
	return wholeFailure(res[0].Err)
}
