package syncer

import (
	"sync"
	"time"
)

// budget is the share of Redis one instance may load at a time: a window
// of script calls (commands) in flight, moved as TCP moves its congestion
// window (a slow start, then additive increase, multiplicative decrease).
//
// Why: Redis runs every call on one thread, so when the fleet offers more
// than it can run within the calls' deadline, every call waits in its
// queue, times out, and is sent again: the offered load never falls and
// the fleet stays in its failure mode while Redis is up. With a window,
// an instance whose calls come back slow (Syncer.congestedAfter) or time
// out sends fewer, before the queue reaches the deadlines; the tenants it
// did not serve stay due and go in a later round, in turns (admit.go).
// The window grows back by one command per window of commands answered
// in time. It starts small and doubles every window of commands answered
// in time until the first late one (a slow start): a syncer that started
// with a large window, beside many others doing the same with thousands
// of new tenants each, queued seconds of calls in Redis before the first
// late reply could cut it (BenchmarkFleet at 32 x 2,000: 527 calls
// answered in time in the whole run).
//
// It is pure bookkeeping with time passed in: safe for concurrent use, no
// goroutine, no clock of its own.
type budget struct {
	mu       sync.Mutex
	window   float64   // commands allowed in flight; guarded by mu
	inFlight int       // commands taken and not yet done; guarded by mu
	cutAt    time.Time // when the window was last cut; guarded by mu
	cuts     int64     // cuts so far, for Stats; guarded by mu
	// calmAfter is when the window stops binding: budgetCalm after the
	// start (init) or the last cut. Guarded by mu.
	calmAfter time.Time
	// slow is the slow start: no cut yet, and the window doubles every
	// window of timely commands. Guarded by mu.
	slow bool
	// healthy is the window as of the last call answered in time (init's
	// at first), and atOutage what it was when the circuit breaker last
	// opened: the window recovered goes back to. Guarded by mu.
	healthy, atOutage float64
}

// The window's bounds. It starts at budgetInitial and never falls below its
// floor, this instance's share of budgetFleetFloor (budgetFloor, by the
// fleet's size as Syncer.callFloor counts it), and at least budgetMin, so
// that a busy Redis still serves the most urgent tenants every round
// trip. budgetMin is one command, so that the fleet's floors together
// stay budgetFleetFloor up to 256 instances, and a command an instance
// beyond: at 8, as before, the floors of 256
// instances alone made a queue of 2,048 commands, 82 ms of a Redis
// running a command in 40 µs, past a call's deadline of about 50 ms, and
// in the queue model of that fleet (TestSaturatedLargeFleet) every call
// timed out after the start and 0 % of the rate was admitted; 101-103 %
// with floors of one command (docs/performance.md, "Many instances on a
// saturated Redis").
const (
	budgetMin     = 1
	budgetInitial = budgetFleetFloor
	budgetMax     = 1 << 20
	// budgetFleetFloor is the most commands the instances of a fleet
	// keep in flight together with every window at its floor: about 10 ms
	// of a Redis thread at 40 µs an acquire. A floor of 64 for each
	// instance, as before, was that for 4 instances, but 16 instances'
	// floors made a queue of 1,024 commands, longer than the deadline of
	// a call of one command (50 ms by default), and at 16 x 1,000 those
	// calls, a cold tenant's first lease among them, timed out whatever
	// the windows did.
	budgetFleetFloor = 256
)

// budgetFloor is the floor of the window of one of instances instances
// (Syncer.callFloor says how many).
func budgetFloor(instances int) int {
	return max(budgetMin, budgetFleetFloor/max(instances, 1))
}

// init starts the window at now, in its slow start.
func (b *budget) init(now time.Time) {
	b.window = budgetInitial
	b.healthy = budgetInitial
	b.slow = true
	b.calmAfter = now.Add(budgetCalm)
}

// budgetCalm is how long after the start or its last cut the window
// binds: a Redis whose calls have not been late for that long is not
// congested, and then take grants whatever the window says, so that a
// healthy Redis sees rounds as large as the syncer makes them (a flood of
// new tenants, say) and no tenant waits on the window.
const budgetCalm = 5 * time.Second

// take grants up to n commands of room in the window at time now and
// returns how many; 0 when the window is full. Every grant must be
// followed by done. The window binds only within budgetCalm of the start
// or its last cut. force grants n whatever the window says: for calls that must go
// (returns, a quota re-read), which still count as in flight.
func (b *budget) take(n int, force bool, now time.Time) int {
	if n <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !force && b.binds(now) {
		n = min(n, max(int(b.window)-b.inFlight, 0))
	}
	b.inFlight += n
	return n
}

// giveBack returns n commands of room that take granted for calls never
// sent (a round's work dropped as Run ended) or not answered without
// being late (refused, or failed by the breaker: call): they leave the
// window as they came, neither timely nor late.
func (b *budget) giveBack(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight = max(b.inFlight-n, 0)
}

// done records that a call of n commands taken at sent came back at now
// (or failed late then: a call failed at once goes to giveBack); late
// says it was congested: its reply came slow, or
// not within its deadline. A late call cuts the window by half, not
// below floor (budgetFloor), at most once per round trip (the calls already in
// flight when it was cut saw the same queue) and ends the slow start; a
// timely one grows it by n in the slow start, else by n / window, one
// command per window of commands, but only when the window limited: at
// least half of it was in flight with the call. Why: while Redis keeps up
// and the rounds are small, or the window does not bind (budgetCalm), the
// window said nothing of what Redis could take, and growing it then (as
// TCP does not, RFC 7661) left it so large that a later congestion was
// not held back: a minute of 10,000 timely commands a second took it to
// 600,256, and 9 late round trips (about 1.6 s) were needed to cut it
// below the 8,000 commands one instance can have in flight
// (TestBudgetGrowsOnlyWhenItLimits).
func (b *budget) done(n int, sent, now time.Time, late bool, floor int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	used := b.inFlight // in flight with this call
	b.inFlight = max(b.inFlight-n, 0)
	// The floor may have risen since the last cut (Syncer.callFloor: a
	// fleet's roster counted, a count confirmed): the window is never
	// below it.
	b.window = max(b.window, float64(floor))
	if late {
		if sent.After(b.cutAt) {
			b.window = max(b.window/2, float64(floor))
			b.cutAt = now
			b.calmAfter = now.Add(budgetCalm)
			b.slow = false
			b.cuts++
		}
		return
	}
	switch {
	case 2*float64(used) < b.window:
		// The window did not limit this call: no growth.
	case b.slow:
		b.window = min(b.window+float64(n), budgetMax)
	default:
		b.window = min(b.window+float64(n)/b.window, budgetMax)
	}
	b.healthy = b.window
}

// outage records, as the circuit breaker opens (calls failed in a row),
// the window as of the last call answered in time, for recovered.
func (b *budget) outage() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.atOutage = b.healthy
}

// recovered undoes the cuts made since the last call answered in time
// before the circuit breaker opened: the window is back to what it was
// then, if it is smaller. The syncer calls it when the breaker closes.
//
// Why: in an outage (a failover, a restart) every call times out, from
// the first one after the outage began to the breaker's probes, one an
// interval, and each cut the window, though none said anything of how
// busy Redis is: without this, a Sentinel failover's recovery was held
// back for budgetCalm (TestSentinelFailover). But the cuts made while
// calls were still answered stay: under saturation calls time out in a
// row too, and a window that started over when the breaker closed
// offered the saturated Redis a flood again (the queue model,
// TestSaturatedRedisServesItsCapacity, went round that cycle every
// second or two).
func (b *budget) recovered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.window = max(b.window, b.atOutage)
}

// binds reports whether the window limits takes at now: within
// budgetCalm of the start or its last cut. b.mu must be held.
func (b *budget) binds(now time.Time) bool {
	return now.Before(b.calmAfter)
}

// state returns the window and the commands in flight.
func (b *budget) state() (window float64, inFlight int, cuts int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.window, b.inFlight, b.cuts
}

// roomFor takes room in the call budget of node, the node that serves t,
// for t's call a planned at now, and reports whether it got it. Without
// room (the node busy) the call is not made: t is planned again a
// quarter interval on (Planner.Skipped). A quota re-read, which follows a
// change once, always goes. t's lock is held.
func (s *Syncer) roomFor(t *Tenant, node *redisNode, now time.Time, a Action) bool {
	if node.budget.take(1, a.Read, now) == 1 {
		return true
	}
	s.holdBack(t, now, 0, a.cut)
	return false
}

// holdBack records that t's call planned at now is not made for want of
// room in its node's call budget: t is planned again a quarter interval
// on, or wait on when that is longer (Planner.Skipped; cut is the plan's
// Action.cut), and Stats counts it. Requests are told when its next call
// may go (Tenant.RetryAfter), and rounds pass it by until then
// (quiet.go). t's lock is held.
func (s *Syncer) holdBack(t *Tenant, now time.Time, wait time.Duration, cut *reservation) {
	s.planner.Skipped(t.st(), *t.Limits(), now, wait, cut)
	s.setRetry(t)
	t.quietUntil.Store(s.quietUntil(t))
	s.heldBack.Add(1)
}
