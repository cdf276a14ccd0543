package syncer

import (
	"context"
	"sync"
	"time"
)

// quotaPoll is Cluster mode's poll of the quota version, which runs beside
// the rounds: the version's key lives on one node, and a tick must not wait
// for that node when it is dead or slow. A tick uses the result of the
// last poll that finished and starts the next one when due; a change is
// thus seen one tick later than without Cluster.
type quotaPoll struct {
	mu      sync.Mutex // guards the fields below
	running bool       // a poll is in flight
	done    bool       // a poll finished and its result is not taken yet
	last    quotaRead  // its result
}

// quotaRead is a read of the quota version.
type quotaRead struct {
	v   int64
	err error
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
func (p *quotaPoll) finish(v int64, err error) {
	p.mu.Lock()
	p.running, p.done, p.last = false, true, quotaRead{v, err}
	p.mu.Unlock()
}

// pollQuota reads the quota version (at most every half interval) and
// reports whether it moved since the last read, or could not be read:
// then every tenant active here re-reads its quota in this round. In
// Cluster mode it reports the result of the last poll that finished and
// leaves the next one running (see quotaPoll).
func (s *Syncer) pollQuota(ctx context.Context, now time.Time) bool {
	if s.opts.Cluster {
		return s.pollQuotaAsync(ctx, now)
	}
	if !s.quotaDue(now) {
		return false
	}
	s.quotaPolled = now.UnixNano()
	return s.noteQuota(s.readQuota(ctx))
}

// quotaDue reports whether the quota version is due to be read.
func (s *Syncer) quotaDue(now time.Time) bool {
	return !s.quotaKnown || now.UnixNano()-s.quotaPolled >= int64(s.planner.Config().Interval)/2
}

// readQuota reads the quota version under the call deadline. Without
// Cluster, an answer is a call of this instance answered in time, as a
// lease call's is (redisNode.answered): lease calls that time out meanwhile
// find Redis busy, not down (busy).
//
// Why: before any lease call of its own was answered, a limiter took every
// timeout for an outage, so a fleet started at once, whose first calls
// queued in Redis behind each other's, opened breakers and put tenants in
// their failure mode while Redis answered. The version is read before the
// first round, and every half interval.
func (s *Syncer) readQuota(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	v, err := s.client.QuotaVersion(ctx)
	if err == nil && !s.opts.Cluster {
		s.one.answered.Store(s.opts.Now().UnixNano())
	}
	return v, err
}

// noteQuota records a read of the quota version and reports whether the
// quotas must be read again: the version moved, or could not be read.
func (s *Syncer) noteQuota(v int64, err error) bool {
	if err != nil {
		return true
	}
	changed := !s.quotaKnown || v != s.quotaVer
	s.quotaVer, s.quotaKnown = v, true
	return changed
}

// pollQuotaAsync is pollQuota in Cluster mode.
func (s *Syncer) pollQuotaAsync(ctx context.Context, now time.Time) bool {
	changed := false
	if r, ok := s.poll.take(); ok {
		changed = s.noteQuota(r.v, r.err)
	}
	if !s.quotaDue(now) || !s.poll.start() {
		return changed
	}
	s.quotaPolled = now.UnixNano()
	s.closeMu.RLock()
	async := !s.closed
	if async {
		s.async.Add(1)
	}
	s.closeMu.RUnlock()
	if !async {
		// Closed: nothing may outlive Close, so read now.
		s.poll.finish(s.readQuota(ctx))
		r, _ := s.poll.take()
		return s.noteQuota(r.v, r.err) || changed
	}
	go func() {
		defer s.async.Done()
		s.poll.finish(s.readQuota(ctx))
	}()
	return changed
}
