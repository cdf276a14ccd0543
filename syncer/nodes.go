package syncer

import (
	"context"
	"sync"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/telemetry"
)

// A NodeLocator is a lease.Store whose tenants live on several nodes that
// fail independently, such as *lease.Client on a Redis Cluster client. The
// syncer checks for it on the Store it is given; a Store without it (one
// Redis, lease/memstore) is one node.
//
// In Cluster mode a round sends each node's calls on their own, and a
// dead or slow node holds up only its own tenants: the next rounds go on
// for everyone else while its call waits for its deadline.
type NodeLocator interface {
	// NodeOf names the node that serves tenant's buckets now, or reports
	// false when it does not know. It must be cheap (it runs for every
	// tenant a round calls for) and may be stale: it only groups calls,
	// whose routing is the Store's business.
	NodeOf(ctx context.Context, tenant string) (node string, ok bool)
}

// *lease.Client names a tenant's Redis Cluster master.
var _ NodeLocator = (*lease.Client)(nil)

// nodeWork is what one round does on one node: the returns of its
// tenants' expired and drained tokens, then its tenants' acquires (their
// locks held until the results are applied).
type nodeWork struct {
	node     *redisNode // the node; its budget holds the jobs' room
	releases []lease.ReleaseRequest
	jobs     []job
}

// byNode groups a round's releases and jobs by the node of their tenant
// (a job's as the planning found it, job.node). Tenants whose node is
// unknown, and all of them when the Store is no NodeLocator, form the
// group "".
func (s *Syncer) byNode(ctx context.Context, releases []lease.ReleaseRequest, jobs []job) map[string]*nodeWork {
	loc, _ := s.client.(NodeLocator)
	// The look-ups are local, except that a cluster client that has not
	// loaded its slot map yet loads it on the first: bound that, since it
	// runs in the loop.
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	nodeOf := func(tenant string) string {
		if loc == nil {
			return ""
		}
		n, _ := loc.NodeOf(ctx, tenant) // "" when unknown
		return n
	}
	groups := map[string]*nodeWork{}
	group := func(node string) *nodeWork {
		w := groups[node]
		if w == nil {
			w = &nodeWork{node: s.node(node)}
			groups[node] = w
		}
		return w
	}
	for _, r := range releases {
		w := group(nodeOf(r.Tenant))
		w.releases = append(w.releases, r)
	}
	for _, j := range jobs {
		w := group(j.node)
		w.jobs = append(w.jobs, j)
	}
	return groups
}

// dispatch carries out a round in Cluster mode (round is its telemetry,
// ended here or by the last of its groups): one goroutine per node runs
// that node's work and returns without waiting for it. The round's tenants
// stay locked until their results are applied, so later rounds skip them
// and go on for everyone else.
//
// A node's work waits for the node's work of earlier rounds to finish
// before it makes its calls: a dead node then has at most one round's
// calls in flight from rounds; and the maxInFlight slots are each
// node's, so its calls and its tenants' refills hold none that the live
// nodes' calls need. Work that has not started
// its calls when Run's ctx ends is dropped (see drop), so that Run waits
// for no more than the calls in flight.
//
// After Close the groups run one after the other before dispatch returns.
func (s *Syncer) dispatch(ctx context.Context, round *telemetry.Round, now time.Time, releases []lease.ReleaseRequest, jobs []job) {
	groups := s.byNode(ctx, releases, jobs)
	if len(groups) == 0 {
		s.endRound(round)
		return
	}
	r := &asyncRound{s: s, r: round, left: len(groups)}
	s.closeMu.RLock()
	async := !s.closed
	if async {
		s.async.Add(len(groups))
	}
	s.closeMu.RUnlock()
	if !async {
		for _, w := range groups {
			r.done(s.carryOut(ctx, now, w))
		}
		return
	}
	// Forget the nodes with nothing in flight: node names change with
	// failovers.
	for node, done := range s.nodeDone {
		select {
		case <-done:
			delete(s.nodeDone, node)
		default:
		}
	}
	if s.nodeDone == nil {
		s.nodeDone = map[string]chan struct{}{}
	}
	stop := s.stopping
	for node, w := range groups {
		prev := s.nodeDone[node]
		done := make(chan struct{})
		s.nodeDone[node] = done
		go func() {
			defer s.async.Done()
			defer close(done)
			if !turn(prev, stop) {
				s.drop(w, now)
				r.done(telemetry.Round{})
				return
			}
			r.done(s.carryOut(ctx, now, w))
		}()
	}
}

// turn waits for prev, the end of a node's earlier work (nil for none),
// or for stop (the end of Run's ctx; nil outside Run), and reports whether
// the work may make its calls: not once stop is closed.
func turn(prev, stop <-chan struct{}) bool {
	if prev != nil {
		select {
		case <-prev:
		case <-stop:
		}
	}
	select {
	case <-stop:
		return false
	default:
		return true
	}
}

// drop gives up w without a call: its tenants are unlocked as though no
// call had been planned (the planner keeps nothing for a call in flight
// but the rate share an ask cut, which Redis still holds: given back,
// State.uncut), the room its calls took in the node's window goes back
// (admit took it; a call would have given it back), and its returns are
// left to the next round or ReleaseAll. Nothing was sent, so no granted
// token is lost.
func (s *Syncer) drop(w *nodeWork, now time.Time) {
	for _, j := range w.jobs {
		j.t.st().uncut(j.cut)
		j.t.mu.Unlock()
	}
	w.node.budget.giveBack(len(w.jobs))
	if len(w.jobs) > 0 {
		s.unlocked.Broadcast()
	}
	if len(w.releases) > 0 {
		s.queueOrForfeit(now, w.releases...) // their ages were reckoned at the round's now
	}
}

// asyncRound is a round whose node groups finish on their own: the last
// one ends it.
type asyncRound struct {
	s    *Syncer
	mu   sync.Mutex       // guards r and left
	r    *telemetry.Round //
	left int              // groups not done yet
}

// done adds the totals of a group and ends the round after the last one.
func (a *asyncRound) done(tot telemetry.Round) {
	a.mu.Lock()
	a.r.Add(tot)
	a.left--
	last := a.left == 0
	a.mu.Unlock()
	if last {
		a.s.endRound(a.r)
	}
}

// Wait waits for the lease calls, and the poll of the quota version, that
// Tick, Urgent and Round started and left running: in Cluster mode they
// return once their calls are sent (see Round). Without Cluster they
// finish their calls before returning, and Wait waits only for the poll
// (none in driven mode, where Tick reads the version itself).
//
// Run waits for them before it returns, and Close waits for them too. A
// caller that drives the syncer itself (a deterministic simulation) calls
// Wait when it needs a round's results, and before ReleaseAll. Wait must
// not run concurrently with Tick, Urgent or Round.
func (s *Syncer) Wait() { s.async.Wait() }
