package syncer

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sony/gobreaker/v2"

	"github.com/leasequota/leasequota/lease"
)

// perCommand is the time a pipeline gets for each of its commands on top
// of the call timeout.
const perCommand = 300 * time.Microsecond

// Bounds of the syncer's Redis traffic (docs/failure-modes.md states them).
const (
	maxInFlight = 8    // Redis calls made at once to one node (a redisNode's); a pipeline counts as one
	batchSize   = 1000 // the most tenants in one pipeline
	// breakerFailures failed Redis calls in a row open the circuit
	// breaker: calls then fail at once without reaching Redis, until after
	// an interval one probe call is let through, whose success closes it.
	breakerFailures = 3
	// probeTenants is the most tenants whose acquires a round sends in
	// the breaker's probe (carryOut): what the probe asks is whether
	// Redis runs writes, and one script tells.
	probeTenants = 1
)

// MaxDownAfter is the longest Redis may answer nothing in time before its
// timeouts count as an outage (Syncer.busy): the default lease TTL, up to
// this.
//
// Why a bound apart from the lease TTL: a longer lease halves a fleet's
// lease calls (docs/tuning.md), but a Redis that went silent was told from
// a busy one a lease TTL later, so lengthening the lease slowed the
// failure mode's start by as much. A second is what every fault test
// (docs/failure-modes.md) measured before the default lease TTL became
// 2 s.
const MaxDownAfter = time.Second

// downAfter is how long Redis may answer nothing in time before its
// timeouts count as an outage (busy, livenessTimeout): the default lease
// TTL, at most MaxDownAfter.
func (s *Syncer) downAfter() time.Duration { return min(s.leaseTTL, MaxDownAfter) }

// call runs one Redis round trip of op (size commands) to node under
// the concurrency bound, the call deadline (timeout, or callTimeout(size)
// when 0) and the circuit breaker, in a span.
// f's error must be a failure of the round trip as a whole (Redis not
// answering, or answering that it runs no command: unavailable), not an
// error reply about one tenant: only the former trips the breaker.
//
// The size commands were taken from node's call budget by the caller;
// they go back when the call ends, and a call that came back slow
// (congestedAfter) or timed out cuts the window. A timed-out call is a
// slow one, so in an outage every timeout cuts it too; they say nothing
// of how many calls the node runs once it is back, and the outage's end
// undoes them: without Cluster the circuit breaker's closing, in Cluster
// mode (no breaker) the node's first answer after it (nodeHealth).
func (s *Syncer) call(ctx context.Context, op string, node *redisNode, size int, timeout time.Duration, f func(context.Context) ([]lease.Result, error)) ([]lease.Result, error) {
	if err := s.waitSlot(ctx, node, func() int { return size }); err != nil {
		return nil, err
	}
	defer node.sem.Release(1)
	return s.callHeld(ctx, op, node, size, timeout, f)
}

// waitSlot waits for one of node's call slots (maxInFlight) for a call
// whose size in commands size tells once the wait is over (a group of
// refills grows while it waits: refillgroup.go). When ctx ends first, the
// call is over, and its room in the budget is accounted for as a call's
// that failed so (called).
func (s *Syncer) waitSlot(ctx context.Context, node *redisNode, size func() int) error {
	asked := s.opts.Now()
	err := node.sem.Acquire(ctx, 1)
	n := size()
	if err != nil {
		s.called(node, n, asked, err)
	}
	return err
}

// callHeld is call once the caller holds one of node's slots, which it
// releases after.
func (s *Syncer) callHeld(ctx context.Context, op string, node *redisNode, size int, timeout time.Duration, f func(context.Context) ([]lease.Result, error)) (res []lease.Result, err error) {
	// The delay that tells congestion is Redis's (and the client's), not
	// the wait for a slot among this syncer's own calls.
	sent := s.opts.Now()
	if timeout <= 0 {
		timeout = s.callTimeout(size)
	}
	defer func() {
		if timedOut(err) {
			now := s.opts.Now()
			s.starved.observe(now)
			node.timedOutAt(sent, now, timeout)
		}
		s.called(node, size, sent, err)
	}()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, span := s.opts.Telemetry.StartCall(ctx, op, size)
	if s.opts.Cluster || s.closing() {
		// Closing: the last returns are worth a try whatever the breaker
		// says, or the tokens are lost for a refill.
		s.calls.Add(1)
		res, err := f(ctx)
		span.End(err)
		return res, err
	}
	s.breakerTried.Store(s.opts.Now().UnixNano())
	res, err = s.breaker.Execute(func() ([]lease.Result, error) {
		s.calls.Add(1)
		res, err := f(ctx)
		if err != nil {
			s.lastErr.Store(&err)
			if unavailable(err) {
				s.refusedWrites.Store(true)
			}
		}
		return res, err
	})
	span.End(err)
	return res, err
}

// called records the end of a call of size commands to node, sent at sent
// (or which waited for a slot since then), that ended with err: the
// node's last answer, its health in Cluster mode, and the room the call
// took in the budget, which a late call's end cuts.
func (s *Syncer) called(node *redisNode, size int, sent time.Time, err error) {
	now := s.opts.Now()
	late := now.Sub(sent) > s.congestedAfter(size) ||
		timedOut(err) && (!s.opts.Cluster || node.answeredWithin(now, s.downAfter()))
	if s.opts.Cluster {
		s.nodeHealth(node, err, now)
	}
	if err == nil {
		node.answer(now, true)
	}
	if err != nil && !late {
		// Not answered, and not late: refused, or failed by the
		// breaker. That says nothing of how many calls Redis runs:
		// the room goes back and the window stays, and so does the
		// one recorded as of the last call answered in time
		// (budget.outage), which a refusal had overwritten with a
		// window that an outage's late calls had cut
		// (TestRefusedCallsKeepTheWindowToRestore).
		node.budget.giveBack(size)
		return
	}
	node.budget.done(size, sent, now, late, s.callFloor())
}

// nodeHealth records in Cluster mode, where no circuit breaker watches
// the masters, the outage of node and its end, as the breaker's state
// changes do for one Redis (health.go): a call that failed at now with
// the node silent for downAfter (no call answered in time within it, as
// busy tells) begins an outage, and the window as of the node's last
// call answered in time is kept (budget.outage); the first call answered
// after it ends the outage and gives that window back (budget.recovered).
//
// Why: a timed-out call is slow, so every timeout of a master paused or
// stopped cut its window, down to its floor, and with no breaker to undo
// those cuts a master back at the same address kept the window of its
// outage, held back for budgetCalm and grown back one command a window
// after it: 29 commands a second after it answered again where it had
// 256 before (TestClusterPausedMasterGetsItsWindowBack). A new master (a
// failover) gets a new node and a fresh window anyway. The cuts made
// while the master still answered stay, as on one Redis.
func (s *Syncer) nodeHealth(node *redisNode, err error, now time.Time) {
	switch {
	case err == nil:
		if node.down.CompareAndSwap(true, false) {
			node.budget.recovered()
		}
	case !errors.Is(err, context.Canceled) && s.silent(node, now):
		if node.down.CompareAndSwap(false, true) {
			node.budget.outage()
		}
	}
}

// callTimeout is the deadline of a call of size commands: a pipeline of
// many commands queues behind the others in Redis' single thread, so it
// gets time for its size (perCommand, a wide margin over what a script
// call costs) on top of Options.CallTimeout.
func (s *Syncer) callTimeout(size int) time.Duration {
	return s.opts.CallTimeout + time.Duration(size)*perCommand
}

// congestedAfter is how long a call of size commands may take before its
// delay counts as congestion (budget.done's late), though it was
// answered: half its deadline, and at most a quarter of the default
// lease TTL.
//
// Why a delay and not only a timeout: when the fleet offers Redis more
// than it runs, replies come later and later, and the calls that then
// time out put their tenants in the failure mode while Redis is up. A
// lease lives LeaseTTL from when Redis ran its call only as far as the
// server's clock tells (serverclock.go; from the call's plan at worst),
// and a reply that waited behind a whole queue of pipelines arrives with
// less of it left: its tokens expire unspent (and their returns, to a
// bucket drained meanwhile, are forfeited). A window cut when replies slow
// down keeps Redis's queue short before either happens.
func (s *Syncer) congestedAfter(size int) time.Duration {
	return min(s.callTimeout(size), s.leaseTTL/2) / 2
}

// silent reports whether node is silent at now (redisNode.silent) over
// the outage window, this process's starvation taken out.
func (s *Syncer) silent(node *redisNode, now time.Time) bool {
	return node.silent(now, s.downAfter(), s.starved.starvedAt.Load())
}

// busy reports whether err, a failed call's at now for tenant, says that
// Redis is busy rather than down: the call timed out, and Redis (on a
// Redis Cluster, the node that serves tenant) is not silent
// (redisNode.silent): it answered another of this instance's calls in
// time within the last downAfter (the default lease TTL, at most
// MaxDownAfter), a lease call or without Cluster the read of the quota
// version, which the loop makes every half interval (readQuota); or it
// has not yet been asked for downAfter since (the first call after that
// answer that timed out at its deadline went out less than downAfter
// ago), within lateGrace times downAfter of that answer. Without Cluster, a Redis that
// answered that read only late (after the call deadline, within the
// read's own, longer one) is busy too, for up to lateGrace times
// downAfter since its last answer in time (redisNode.reachedLate); and
// while the syncer's first read is still out, a timeout says nothing yet
// (quotaPoll.firstPending), so that a fleet started at once on a Redis
// or a machine too busy to answer within the call deadline does not
// start in its failure mode. A Redis that refuses connections ends that
// read at once (refuses; go-redis retries a refused dial until the
// deadline, so its calls time out too), and its timeouts count from then
// on.
// Such a failure is congestion (it cuts the call budget) but not an
// outage: it neither counts towards the circuit breaker nor makes the
// call's tenants failing, so no failure mode decides for them while Redis
// answers; their requests are decided by their leases, as when the global
// bucket is dry. A Redis that has answered nothing in time for downAfter
// while it was asked (silent) is taken for down, and its timeouts count
// again: a silent
// Redis (a partition, a paused or blackholed server) opens the breaker
// that much later than one that refuses connections.
//
// Why: calls time out together. When the fleet offers Redis more than it
// runs, or the process is too busy to read the replies, each instance's
// calls in flight time out in a row; counted as failures, they opened the
// breaker, whose open state then failed every tenant's call at once and
// put the fleet in its failure mode while Redis was up (BenchmarkFleet at
// 16 x 1,000: most failed calls were the breaker's, failing in under a
// millisecond). On a Redis Cluster a timeout says nothing of the other
// nodes, so what counts there is the tenant's own node's last answer
// (redisNode.answered): with the process short of CPU (two busy loops beside
// the race detector), timeouts on live masters had made their tenants
// fail, denied as unavailable, and TestClusterReshard admitted 0.6 to
// 4.6 % of its tenants' bounds.
func (s *Syncer) busy(ctx context.Context, err error, now time.Time, tenant string) bool {
	if !timedOut(err) {
		return false
	}
	if s.opts.Cluster {
		// Within the call deadline, as every look-up: a cluster client
		// without a slot map loads it on the look-up, and the round's ctx
		// has no deadline, so an unreachable cluster held each timed-out
		// tenant for go-redis's own dial timeouts, one after another.
		ctx, cancel := s.lookupCtx(ctx)
		defer cancel()
		name, ok := s.nodeOf(ctx, tenant)
		return ok && !s.silent(s.node(name), now)
	}
	d := s.downAfter()
	return !s.silent(&s.one, now) || s.one.reachedLate(now, d) || s.poll.firstPending()
}

// Refuser is what a Store may implement to say whether Redis refuses
// connections (lease.Client does: it dials Redis as its pool would).
// Refuses dials once, within ctx, and reports true only when the dial
// failed for a reason other than time: a Redis down, not a slow one.
type Refuser interface {
	Refuses(ctx context.Context) bool
}

// refuses reports whether Redis refuses connections (Refuser), within
// the call deadline; false when the Store does not say. The first poll of
// the quota version asks it before its read (pollQuotaAsync). Why: while
// that read is out, a timeout says nothing (busy), but go-redis retries a
// refused dial until the deadline, so a down Redis's calls time out like
// a busy one's; without the dial's word, a limiter started while Redis
// was down waited a whole lease TTL (the first read's deadline) before
// its failure mode decided. Why a dial and not go-redis's pool:
// lease.Client.Refuses. While the dial is out the read is pending, so if
// the poll's goroutine waits for a CPU longer than the call deadline, a
// limiter started on a refusing Redis takes its first timeout for
// congestion and the next for an outage.
func (s *Syncer) refuses(ctx context.Context) bool {
	r, ok := s.client.(Refuser)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	return r.Refuses(ctx)
}

// AnswersLate reports whether Redis answers, but only after the call
// deadline: without Cluster, the read of the quota version was answered
// within the last downAfter, late, and no call was answered in
// time within it (see busy). Always false in Cluster mode.
func (s *Syncer) AnswersLate() bool {
	if s.opts.Cluster {
		return false
	}
	now := s.opts.Now()
	d := s.downAfter()
	return s.one.reachedWithin(now, d) && !s.one.answeredWithin(now, d)
}

// nodeOf names the node that serves tenant, when the Store knows it.
func (s *Syncer) nodeOf(ctx context.Context, tenant string) (string, bool) {
	loc, ok := s.client.(NodeLocator)
	if !ok || tenant == "" {
		return "", false
	}
	return loc.NodeOf(ctx, tenant)
}

// refused reports whether err is the circuit breaker's refusal: the call
// was not sent, and counts in no total of calls sent (Stats().Calls, the
// rounds' lease requests, the calls' durations).
func refused(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// timedOut reports whether err is a call's deadline or a network
// timeout: Redis did not answer in time, which is what congestion looks
// like. So is a go-redis pool with no connection to give: every one it
// may open (MaxActiveConns) is out on another call (redis.ErrPoolExhausted,
// at once), or none came back within its PoolTimeout
// (redis.ErrPoolTimeout). Why: the connections are there, busy; a wait
// for one that runs out of the call deadline is a deadline error, and
// busy tells either from an outage by Redis's last answer. Counted as a
// failure of Redis, a client whose connections were capped below its
// pool's turns put its tenants in their failure mode, with Redis
// answering (TestExhaustedPoolIsBusy). A refused connection or an open
// circuit breaker is an outage, not congestion, and does not shrink the
// budget.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, redis.ErrPoolExhausted) || errors.Is(err, redis.ErrPoolTimeout)
}

// wholeFailure returns err when it means Redis did not answer, or
// answered that it serves no command now (unavailable), as opposed to an
// error reply about one command; else nil.
func wholeFailure(err error) error {
	var rerr redis.Error
	if err == nil || errors.As(err, &rerr) && !unavailable(err) || errors.Is(err, lease.ErrBadRequest) || errors.Is(err, lease.ErrBadReply) {
		return nil
	}
	return err
}

// unavailable reports whether err is an error reply by which Redis says
// that it runs no command now, whatever its keys: LOADING (a restart
// loading its data), READONLY (a replica: a failover's demoted master
// still reached at its old address, or a client pointed at a replica),
// MASTERDOWN (a replica cut off from its master, with
// replica-serve-stale-data no), NOREPLICAS (fewer replicas than
// min-replicas-to-write: no write runs) or BUSY (a script or function
// running past busy-reply-threshold). go-redis has already retried each
// of them but BUSY (MaxRetries), in vain. Such a reply is an outage, not a failure
// about a tenant: it counts for the circuit breaker, and marks the outage
// a Cold tenant's failure ends with (Failing).
//
// Why: taken for failures about one tenant (as OOM is), a Redis that
// answered READONLY to every call for 2 s (REPLICAOF to a master that
// never came) kept the breaker closed and Degraded false, logged nothing
// and notified no OnDegraded, while every tenant was decided by its
// failure mode and every round still sent each tenant's call (384
// READONLY replies); TestReadOnlyRedisIsAnOutage and
// TestBusyRedisIsAnOutage in the integration module.
func unavailable(err error) bool {
	for _, p := range [...]string{"LOADING ", "READONLY ", "MASTERDOWN ", "NOREPLICAS ", "BUSY "} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// allUnavailable returns the error of the first of results when every
// one of them is an unavailable reply (a whole pipeline answered so, as
// a server that runs no command answers each), else nil.
func allUnavailable(results []lease.Result) error {
	if len(results) == 0 {
		return nil
	}
	for _, r := range results {
		if !unavailable(r.Err) {
			return nil
		}
	}
	return results[0].Err
}
