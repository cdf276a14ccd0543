package syncer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// quotaPoll is the poll of the quota version, which runs beside the
// rounds (but in driven mode without Cluster, where a tick reads it
// itself): a tick uses the result of the last poll that finished and
// starts the next one when due, so a change is seen one tick later than
// when the tick waited for it. Why beside: on a Redis Cluster the
// version's key lives on one node, and a tick must not wait for that
// node when it is dead or slow; and the read is also how a syncer tells
// a Redis that answers late from a silent one (readQuota), which takes a
// deadline longer than a tick may wait.
type quotaPoll struct {
	mu       sync.Mutex // guards the fields below
	running  bool       // a poll is in flight
	finished bool       // a poll has finished (the first is no longer pending)
	answered bool       // a poll has read the version (livenessTimeout)
	done     bool       // a poll finished and its result is not taken yet
	last     quotaRead  // its result
}

// quotaRead is a read of the quota version.
type quotaRead struct {
	v   int64
	err error
	at  int64 // when it ended (Options.Now, unix nanoseconds)
}

// take returns the result of the poll that finished last, once.
func (p *quotaPoll) take() (r quotaRead, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done {
		return quotaRead{}, false
	}
	p.done = false
	return p.last, true
}

// start marks a poll in flight, and reports false when one already is.
func (p *quotaPoll) start() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return false
	}
	p.running = true
	return true
}

// finish records the result of the poll in flight.
func (p *quotaPoll) finish(v int64, err error, at time.Time) {
	p.mu.Lock()
	p.running, p.finished, p.done, p.last = false, true, true, quotaRead{v, err, at.UnixNano()}
	p.answered = p.answered || err == nil
	p.mu.Unlock()
}

// hasAnswered reports whether a poll has read the version.
func (p *quotaPoll) hasAnswered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered
}

// hasFinished reports whether a poll has finished.
func (p *quotaPoll) hasFinished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finished
}

// firstPending reports whether the first poll is in flight: until it
// ends (answered, failed, or out of its deadline), the syncer cannot tell
// a busy Redis from a down one (busy).
func (p *quotaPoll) firstPending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running && !p.finished
}

// pollQuota reads the quota version (at most every half interval) and
// reports whether it moved since the last read, or was read for the
// first time (noteQuota):
// then every tenant active here re-reads its quota in this round. It
// uses the result of the last poll that finished and leaves the next one
// running (quotaPoll), but in driven mode without Cluster, where it reads
// the version itself.
func (s *Syncer) pollQuota(ctx context.Context, now time.Time) bool {
	if s.opts.Cluster || !s.opts.Driven {
		return s.pollQuotaAsync(ctx, now)
	}
	if !s.quotaDue(now) {
		return false
	}
	s.quotaPolled = now.UnixNano()
	v, err := s.readQuota(ctx, s.opts.CallTimeout)
	read := quotaRead{v, err, s.opts.Now().UnixNano()}
	if s.rosterDue(now) {
		s.countRoster(ctx, now, s.opts.CallTimeout, err == nil)
	}
	return s.noteQuota(read)
}

// quotaDue reports whether the quota version is due to be read.
func (s *Syncer) quotaDue(now time.Time) bool {
	return !s.quotaKnown || now.UnixNano()-s.quotaPolled >= int64(s.planner.Config().Interval)/2
}

// readQuota reads the quota version under timeout. Without Cluster, it is
// also the syncer's liveness read: an answer within the call deadline is
// a call answered in time, as a lease call's is, and a later one within
// timeout an answer all the same (redisNode.answer), so that lease calls
// that time out meanwhile find Redis busy, not down (busy).
//
// Why: before any lease call of its own was answered, a limiter took every
// timeout for an outage, so a fleet started at once, whose first calls
// queued in Redis behind each other's, opened breakers and put tenants in
// their failure mode while Redis answered. And a process too short of
// CPU to read replies within the call deadline read none for a lease
// lifetime, and did the same (redisNode.reachedLate).
//
// Without Cluster, while the circuit breaker is open or probing (Down)
// and no lease call has tried it for an interval (idleBreaker), the read
// is also the breaker's probe: once the breaker lets one call through,
// the read is that call, and its answer closes the breaker (a read the
// breaker refuses is made beside it, as before); after a reply that
// Redis runs no write, a write that changes nothing goes with it
// (probeWrite). Why: only lease calls
// probed the breaker, and a limiter that made none after an outage (no
// request, or its tenants gone quiet) stayed Degraded for good while
// Redis answered its reads: leasequota.degraded stayed 1, and Close
// skipped leaving the roster (TestDegradedEndsWithoutTraffic: Degraded
// still true 10 s after Redis came back, at R = 100 ms). While lease
// calls are made, one of them probes, as before: a read answered in time
// says less of a saturated Redis than a lease call does (a lease probe
// that times out there cuts the call window as the breaker closes).
func (s *Syncer) readQuota(ctx context.Context, timeout time.Duration) (int64, error) {
	if s.opts.Cluster || !s.down.Load() || !s.idleBreaker() {
		return s.readQuotaOnce(ctx, timeout)
	}
	var (
		v       int64
		readErr error
	)
	_, err := s.breaker.Execute(func() ([]lease.Result, error) {
		v, readErr = s.readQuotaOnce(ctx, timeout)
		if readErr == nil {
			return nil, s.probeWrite(ctx, timeout)
		}
		return nil, readErr
	})
	if refused(err) {
		return s.readQuotaOnce(ctx, timeout)
	}
	return v, readErr
}

// WriteProber is what a Store may implement to run a write that changes
// nothing and report Redis's error (lease.Client does: ProbeWrite).
type WriteProber interface {
	ProbeWrite(ctx context.Context) error
}

// probeWrite returns, for the breaker's probe by the read of the quota
// version (readQuota), the error of a write that changes nothing when a
// reply that Redis runs no write (READONLY, NOREPLICAS: unavailable)
// failed a call since the breaker last closed (refusedWrites), not only
// the last one, and that write is refused so too; else nil.
// Why: such a Redis (a replica, a master short of replicas) answers the
// read, so the read closed the breaker, and every tenant's call failed
// again at once, each interval the limiter made no lease call of its
// own: with no requests after a READONLY fault began, Degraded was false
// in 6,637 to 7,500 of 10,000 samples over 10 s of READONLY replies
// (TestReadOnlyProbeKeepsTheBreakerOpen; on a real replica, 194 and 355
// of ~1,700 over 2 s in two runs of TestReadOnlyRedisStaysAnOutage in the
// integration module, which does not fail every run). The write
// goes only then: a Redis that does not answer, or answers LOADING, BUSY
// or MASTERDOWN, fails the read itself. A write that gets no answer in
// time fails the probe too; another error reply to the write (an ACL
// that refuses it) says nothing of an outage: the read stands.
func (s *Syncer) probeWrite(ctx context.Context, timeout time.Duration) error {
	if !s.refusedWrites.Load() {
		return nil
	}
	w, ok := s.client.(WriteProber)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Only an error reply about the write itself (an ACL that refuses
	// it) lets the read stand; a write that did not run for want of an
	// answer (a timeout, a refused connection) or was refused as an outage
	// is no write that ran (wholeFailure). Taken for one, a write probe
	// that timed out closed the breaker while every write was refused
	// (TestReadOnlyOutageOutlivesATimeout/write-probe).
	if err := w.ProbeWrite(ctx); wholeFailure(err) != nil {
		return err
	}
	return nil
}

// idleBreaker reports whether no lease call has tried the circuit breaker
// (call) for an interval, the breaker's own timeout: then none would
// probe it.
func (s *Syncer) idleBreaker() bool {
	return s.opts.Now().UnixNano()-s.breakerTried.Load() >= int64(s.planner.Config().Interval)
}

// readQuotaOnce is readQuota without the breaker.
func (s *Syncer) readQuotaOnce(ctx context.Context, timeout time.Duration) (int64, error) {
	began := s.opts.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := s.client.QuotaVersion(ctx)
	if !s.opts.Cluster {
		now := s.opts.Now()
		switch {
		case err == nil:
			s.one.answer(now, now.Sub(began) <= s.opts.CallTimeout)
		case timedOut(err):
			s.starved.observe(now)
			s.one.timedOutAt(began, now, timeout)
		}
	}
	return v, err
}

// livenessTimeout is the deadline of a poll of the quota version beside
// the rounds: half of downAfter (the default lease lifetime, at most
// MaxDownAfter), and never less than the call deadline. A Redis whose
// answers take longer than that cannot lease usefully (a lease lives
// LeaseTTL from its call), and is taken for down. Until a poll has read
// the version, polls get a whole downAfter.
//
// Why: a fleet started at once queues every instance's first
// calls in Redis before any reply can cut a call window, and a read
// queues behind them. At 32 x 2,000 (BenchmarkFleet, 32 load goroutines
// an instance) the first reads timed out at half a lease lifetime, no
// answer yet, the lease calls' timeouts then opened breakers, and 5,615
// to 94,582 decisions a run were made by the failure mode, every one
// of them of a tenant failed in the run's first second; with the whole
// lifetime (then 1 s, as downAfter is now), none in three runs of
// b522ddb (docs/performance.md has later ones). A Redis silent from the
// start (one that accepts connections) is taken for down that much
// later; one that refuses them, at once (Syncer.refuses), and the polls
// after that refusal keep the whole downAfter: a Redis that comes back
// meets the same storm of first calls.
func (s *Syncer) livenessTimeout() time.Duration {
	d := s.downAfter() / 2
	if !s.poll.hasAnswered() {
		d = s.downAfter()
	}
	return max(s.opts.CallTimeout, d)
}

// noteQuota records a read of the quota version and reports whether the
// quotas must be read again: the version was read for the first time, or
// moved. A read that failed tells nothing: the version only rises, so a
// change made meanwhile shows as a move at the next read that succeeds.
// Why: a read fails when Redis is saturated (or down, when the tenants'
// own calls fail too), and taken for a move it made every active tenant
// held back on a dry bucket call to re-read, at every tick of the half
// interval while reads failed (TestFailedQuotaReadAddsNoCall). Only a
// move from a version read before makes calls in flight or planned
// before the read re-read too (quotaMoved, quotaSeen: flagReread,
// Input.QuotaSeen). Why: the first read comes as a fleet starts; counted
// as a move, it made every tenant whose first call came before it call
// again to re-read, a call a pair more when calls are dearest
// (TestFirstQuotaReadAddsNoCall). A quota changed between a tenant's
// call and the first read is read at its next call, as before the rule.
func (s *Syncer) noteQuota(r quotaRead) bool {
	changed := r.err == nil && (!s.quotaKnown || r.v != s.quotaVer)
	s.quotaMoved = r.err == nil && s.quotaKnown && r.v != s.quotaVer
	if r.err == nil {
		s.quotaVer, s.quotaKnown = r.v, true
	}
	if s.quotaMoved {
		s.quotaSeen.Store(max(s.quotaSeen.Load(), r.at))
	}
	return changed
}

// pollQuotaAsync is pollQuota with the poll beside the rounds. The poll
// ends with Close (Syncer.ctx), not with the round's ctx, which Run does
// not cancel; once closed, the tick reads the version itself.
func (s *Syncer) pollQuotaAsync(ctx context.Context, now time.Time) bool {
	changed := false
	if r, ok := s.poll.take(); ok {
		changed = s.noteQuota(r)
	}
	if !s.quotaDue(now) || !s.poll.start() {
		return changed
	}
	s.quotaPolled = now.UnixNano()
	count := s.rosterDue(now)
	s.closeMu.RLock()
	async := !s.closed
	if async {
		s.async.Add(1)
	}
	s.closeMu.RUnlock()
	if !async {
		if count {
			s.roster.busy.Store(false) // closed: no count
		}
		// Closed: nothing may outlive Close, so read now.
		v, err := s.readQuota(ctx, s.opts.CallTimeout)
		s.poll.finish(v, err, s.opts.Now())
		r, _ := s.poll.take()
		return s.noteQuota(r) || changed
	}
	go func() {
		defer s.async.Done()
		answered := false
		if count {
			defer func() { s.countRoster(s.ctx, now, s.livenessTimeout(), answered) }()
		}
		if !s.poll.hasFinished() && s.refuses(s.ctx) {
			// Down, not busy: the first read ends here, and the lease
			// calls' timeouts count from now on (busy).
			s.poll.finish(0, errRefused, s.opts.Now())
			return
		}
		v, err := s.readQuota(s.ctx, s.livenessTimeout())
		s.poll.finish(v, err, s.opts.Now())
		answered = err == nil
	}()
	return changed
}

// errRefused is the result of a first poll of the quota version that
// found Redis refusing connections (refuses).
var errRefused = errors.New("syncer: Redis refuses connections")
