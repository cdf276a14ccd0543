package syncer

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// redisNode is what a Syncer knows of one Redis server it calls: the one
// Redis without Options.Cluster, or one master of a Redis Cluster. Each
// node has its own call budget and its own last answer, because one
// node's slow replies or timeouts say nothing of another's: a window
// shared by the masters of a cluster would cut the calls of every node
// when one is busy, or (as before the windows were per node, when Cluster
// mode never cut it) let a busy master's queue grow until its calls time
// out.
type redisNode struct {
	// answered is when (Options.Now, unix nanoseconds) a call of this
	// instance to the node was last answered within its deadline; 0
	// before the first. It tells a busy node from a silent one (busy).
	answered atomic.Int64
	// reached is when the node last answered at all: a call in time, or
	// a liveness read (readQuota) that came back after the call deadline
	// but within its own, longer one; firstReached is when it first did.
	// 0 before. They tell a node that answers late from a silent one
	// (reachedLate).
	reached, firstReached atomic.Int64
	// unanswered is when (Options.Now, unix nanoseconds) the first call
	// sent since the node's last answer in time went out, of the calls
	// that timed out at their deadline (not later: timedOutAt); one
	// before answered, or 0, is none, so an answer needs no write here.
	// It tells a node that was asked and stayed silent from one that was
	// not asked (silent).
	unanswered atomic.Int64
	// budget is the window of script calls this instance may have in
	// flight on the node (budget.go): rounds and refills take room in it
	// per tenant before calling, call gives it back.
	budget budget
	// refillDelay is how long the last urgent refill of a tenant the
	// node serves took (refilldelay.go): a dead or slow master's refills
	// say nothing of how soon another master answers.
	refillDelay refillDelay
	// refills gathers the node's refills that wait for a slot into
	// calls of several tenants (refillgroup.go).
	refills refillGroups
	// clock dates the node's grants in the limiter's clock
	// (serverclock.go): each server has its own clock.
	clock serverClock
	// sem bounds the node's calls in flight (maxInFlight; call.go): a
	// dead master's calls, each hanging until its deadline, hold its own
	// slots, not those the other masters' calls need. Shared by every
	// node, eight refills of tenants on a dead master held up every lease
	// call to the live ones for a call deadline
	// (TestClusterDeadNodeRefillsLeaveLiveCalls).
	sem *semaphore.Weighted
	// down is whether, in Cluster mode, a call failed with the node
	// silent for downAfter and none has been answered since: an outage,
	// whose end gives the node its window back (Syncer.nodeHealth).
	// Without Cluster the circuit breaker does this.
	down atomic.Bool
	// used is when (Options.Now, unix nanoseconds) the syncer last looked
	// the node up for a tenant's call (Syncer.node): a node unused for
	// nodeForget is forgotten (Syncer.forgetNodes).
	used atomic.Int64
	// admitFrom is the turn from which a round short of room on the node
	// gives its calls room; admitGranted the room the last such round
	// gave, and admitWanted the calls it had for the node (admit,
	// turnWait). Owned by the loop.
	admitFrom                 uint32
	admitGranted, admitWanted int
}

// init prepares a node first seen at now.
func (n *redisNode) init(now time.Time) {
	n.budget.init(now)
	n.sem = semaphore.NewWeighted(maxInFlight)
}

// answeredWithin reports whether the node answered a call in time within
// d before now.
func (n *redisNode) answeredWithin(now time.Time, d time.Duration) bool {
	last := n.answered.Load()
	return last != 0 && now.UnixNano()-last < int64(d)
}

// timedOutAt records that a call sent at sent with deadline timeout timed
// out at now. A timeout that came no more than its deadline's length
// late, of a call sent after the node's last answer in time, marks the
// node as asked and silent from sent (unanswered), unless an earlier
// call did so already. A later one says the process was short of CPU,
// and that the reply may have been read too late: it says nothing.
func (n *redisNode) timedOutAt(sent, now time.Time, timeout time.Duration) {
	ns, last := sent.UnixNano(), n.answered.Load()
	if now.Sub(sent) > 2*timeout || ns < last {
		return
	}
	// A lost CompareAndSwap means another call recorded one.
	if cur := n.unanswered.Load(); cur == 0 || cur < last {
		n.unanswered.CompareAndSwap(cur, ns)
	}
}

// silent reports whether the node has answered no call in time within d
// before now while it was asked, and this process ran its calls in time:
// it has answered none within d, and a call sent d or more before now
// timed out at its deadline with none answered in time since
// (unanswered), d or more after the process last waited to run as long
// as a call's deadline (starved, unix nanoseconds of Options.Now, 0 for
// never: starvation); or it has answered none within lateGrace times d,
// or never. Why from the call and not from the last answer: an instance
// short of CPU sent nothing for a third of a second after its last
// answer, and its calls after it timed out up to half a second past
// their 50 ms deadline; counted from the last answer, a second of that
// put its tenants in their failure mode with Redis up (BenchmarkFleet at
// 32 x 2,000 with rate shares: 9 to 5,687 decisions by the failure mode
// in 10 runs of 17; docs/performance.md, "An instance that did not
// ask"). Why not while starved: see starvation. The grace bounds how
// long a process too short of CPU to time its calls out at their
// deadline, or to run them at all, keeps a silent Redis for a busy one.
func (n *redisNode) silent(now time.Time, d time.Duration, starved int64) bool {
	last := n.answered.Load()
	ns := now.UnixNano()
	switch {
	case last != 0 && ns-last < int64(d):
		return false
	case last == 0 || ns-last >= int64(lateGrace*d):
		return true
	}
	// One from before the last answer is none (unanswered).
	asked := n.unanswered.Load()
	return asked >= last && ns-max(asked, starved) >= int64(d)
}

// reachedWithin reports whether the node answered at all (in time or
// late) within d before now.
func (n *redisNode) reachedWithin(now time.Time, d time.Duration) bool {
	last := n.reached.Load()
	return last != 0 && now.UnixNano()-last < int64(d)
}

// answer records an answer of the node at now: in time (within the call
// deadline) or late.
func (n *redisNode) answer(now time.Time, inTime bool) {
	ns := now.UnixNano()
	if inTime {
		n.answered.Store(ns)
	}
	n.reached.Store(ns)
	n.firstReached.CompareAndSwap(0, ns)
}

// lateGrace is how many times Syncer.downAfter a node may go on
// answering only late (reachedLate) before its timeouts count as an
// outage again.
const lateGrace = 4

// reachedLate reports whether the node, though it answered nothing in
// time within d before now (the syncer's downAfter), answered late
// within it, and has answered in time (or, never having done so, first
// answered at all) within lateGrace times d: a node that answers, slower
// than the call deadline.
//
// Why: calls time out when the process is too short of CPU to read their
// replies within the deadline, as well as when Redis is. At 32 instances
// x 2,000 tenants on two cores shared with Redis, with a load that a cold
// start does not pause, limiters went a lease lifetime without reading
// any reply in time while Redis answered every call, and decided millions
// of requests by their failure mode (docs/performance.md, "A starved
// process is not a down Redis"). The grace bounds how long: a node that
// answers every call later than the deadline (a network too slow for
// WithRedisTimeout) cannot lease, and is taken for down after it.
func (n *redisNode) reachedLate(now time.Time, d time.Duration) bool {
	if !n.reachedWithin(now, d) {
		return false
	}
	since := n.answered.Load()
	if since == 0 {
		since = n.firstReached.Load()
	}
	return now.UnixNano()-since < int64(lateGrace*d)
}

// node returns the redisNode named name (an address from NodeOf), made
// with a fresh budget when first seen, and notes its use at now. Without
// Cluster, and for the name "" (a tenant whose node is unknown, or calls
// that mix the nodes' tenants, as Close's returns do), it is s.one.
//
// A node unused for nodeForget is forgotten (forgetNodes, which node runs
// at most once per nodeForget): node names change with failovers (a
// replica promoted under its own address, a master restarted under a new
// one), and an old address, never looked up again, would otherwise stay
// for the Syncer's life, its window as its last timeouts cut it, the
// smallest that Stats reports.
func (s *Syncer) node(name string) *redisNode {
	if !s.opts.Cluster || name == "" {
		return &s.one
	}
	now := s.opts.Now().UnixNano()
	if last := s.nodesForgot.Load(); now-last >= int64(s.nodeForget()) && s.nodesForgot.CompareAndSwap(last, now) {
		s.forgetNodes(now)
	}
	for {
		v, ok := s.nodes.Load(name)
		if !ok {
			n := &redisNode{}
			n.init(s.opts.Now())
			n.used.Store(now)
			v, _ = s.nodes.LoadOrStore(name, n)
		}
		n := v.(*redisNode)
		if n.touch(now) {
			return n
		}
		// forgetNodes forgot n between the load and the touch: it is no
		// longer the master's node. Used, it would be a second node of
		// the master beside the one the next lookup makes, with its own
		// semaphore and window (twice the calls in flight the master
		// may have), its cuts and outage seen by no later call
		// (TestForgetNodesRaceKeepsOneNodePerMaster). Its cuts are
		// counted; take it out if forgetNodes has not yet, and look
		// again.
		s.nodes.CompareAndDelete(name, v)
	}
}

// forgotten is redisNode.used of a node that forgetNodes forgot: touch
// refuses it, so that no lookup uses a node once it is forgotten.
const forgotten = math.MinInt64

// touch notes n's use at now (unix nanoseconds), unless forgetNodes has
// forgot it, which it reports by false.
func (n *redisNode) touch(now int64) bool {
	for {
		u := n.used.Load()
		if u == forgotten {
			return false
		}
		if n.used.CompareAndSwap(u, now) {
			return true
		}
	}
}

// nodeForget is how long a Cluster master may go without a tenant's call
// before its redisNode is forgotten: twice the longer of the idle timeout
// and the syncer's lease TTL, so that a master whose tenants call it
// within either keeps its window and health. A quota's own LeaseTTL may
// be longer (up to a day), and a tenant that holds such a lease may go
// longer without a call: if every tenant of a master does, the master is
// forgotten, and seen again it starts afresh (a whole window, no outage),
// as a master first seen does. Keeping every address for the Syncer's
// life instead kept a dead one's cut window in Stats for good.
func (s *Syncer) nodeForget() time.Duration {
	d := max(s.opts.IdleTimeout, s.leaseTTL)
	if d > math.MaxInt64/2 {
		// An idle timeout of "never" (math.MaxInt64): doubled, it wrapped
		// negative, and every lookup forgot every node.
		return math.MaxInt64
	}
	return 2 * d
}

// stale reports whether n was unused for nodeForget before now (unix
// nanoseconds).
func (s *Syncer) stale(n *redisNode, now int64) bool {
	u := n.used.Load()
	return u == forgotten || now-u >= int64(s.nodeForget())
}

// forgetNodes drops the nodes unused for nodeForget before now (unix
// nanoseconds), keeping their cuts in cutsForgot (Stats.WindowCuts only
// grows). A node is marked forgotten (used) by a compare-and-swap of the
// use it was found stale at, so that a lookup that loaded it meanwhile
// either noted its use first (the node is kept) or finds it forgotten and
// looks again (node): a stale check and a delete alone let that lookup
// use the node it deleted. A call still holding one from before (none
// should, after so long) finishes on it unharmed: it is only no longer
// counted.
func (s *Syncer) forgetNodes(now int64) {
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	s.nodes.Range(func(k, v any) bool {
		n := v.(*redisNode)
		u := n.used.Load()
		if u != forgotten && now-u >= int64(s.nodeForget()) && n.used.CompareAndSwap(u, forgotten) {
			s.nodes.CompareAndDelete(k, v)
			_, _, c := n.budget.state()
			s.cutsForgot += c
		}
		return true
	})
}

// nodeOfTenant returns the redisNode that serves tenant: in Cluster mode
// the one NodeOf names, looked up within CallTimeout (a cluster client
// that has sent nothing yet loads its slot map on the first look-up);
// else s.one.
func (s *Syncer) nodeOfTenant(ctx context.Context, tenant string) *redisNode {
	if !s.opts.Cluster {
		return &s.one
	}
	ctx, cancel := s.lookupCtx(ctx)
	defer cancel()
	name, _ := s.nodeOf(ctx, tenant)
	return s.node(name)
}

// windows returns the smallest window of the nodes' budgets (the most
// congested node's) and the cuts of all of them: in Cluster mode those of
// the masters used within nodeForget (cuts: of all kept), without it
// s.one's.
func (s *Syncer) windows() (window float64, cuts int64) {
	window, _, cuts = s.one.budget.state()
	if !s.opts.Cluster {
		return window, cuts
	}
	first := true
	now := s.opts.Now().UnixNano()
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	cuts += s.cutsForgot
	s.nodes.Range(func(_, v any) bool {
		n := v.(*redisNode)
		w, _, c := n.budget.state()
		if !s.stale(n, now) && (first || w < window) {
			window, first = w, false
		}
		cuts += c
		return true
	})
	return window, cuts
}
