package syncer

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"
)

// NoteMiss records that a request for n tokens found t short and, the
// first time since t was last planned, queues t for the loop. It never
// blocks: when the queue is full the next tick picks t up.
func (s *Syncer) NoteMiss(t *Tenant, n int64) { s.noteUrgent(t, n, n) }

// NoteNeed is NoteMiss for a request that needs n tokens of t's first
// lease but is no miss (Tenant.NoteNeed): t is queued for the loop, and
// its demand counts the request when it spends or misses.
func (s *Syncer) NoteNeed(t *Tenant, n int64) { s.noteUrgent(t, 0, n) }

// NoteWait is NoteMiss for a request that makes the urgent call itself
// (Refill) and waits for it: the miss is recorded, t is not queued for
// the loop, and the next tick sees it as NoteMiss's does.
func (s *Syncer) NoteWait(t *Tenant, n int64) {
	t.NoteMiss(n)
	s.wake(t)
}

// noteUrgent records missed tokens and a need of n on t (Tenant.note)
// and queues t the first time since it was last planned.
func (s *Syncer) noteUrgent(t *Tenant, missed, need int64) {
	first := !t.flag(flagUrgent)
	t.note(missed, need)
	if first {
		select {
		case s.urgent <- t:
		default: // the next tick picks t up
		}
		s.wake(t)
	}
}

// Run plans and refreshes leases until ctx is done, then returns nil once
// every call its rounds started has finished (see Wait). In Cluster mode,
// calls not started when ctx ends, such as those waiting for their node's
// earlier calls, are not made (their returns are left to ReleaseAll). It
// starts the first read of the quota version at once, then is a
// loop of Tick every Interval/4 and Urgent whenever NoteMiss queues a
// tenant; a caller that drives the syncer itself (a deterministic
// simulation) calls those two instead of Run, and Wait.
func (s *Syncer) Run(ctx context.Context) error {
	tick := time.NewTicker(s.tickEvery())
	defer tick.Stop()
	// Read after the ticker started: the ticks nextTick counts from it
	// are no earlier than the ticker's.
	s.tickEpoch.Store(s.opts.Now().UnixNano())
	s.stopping = ctx.Done()
	// A round in flight when ctx ends finishes its calls (each bounded by
	// CallTimeout): canceling them would lose tokens Redis already granted.
	calls := context.WithoutCancel(ctx)
	// The first read of the quota version starts now, not at the first
	// tick, a quarter interval later: until it ends, a lease call's
	// timeout says nothing (busy, which judges a call when it fails, a
	// call deadline after it began: a Refill made just before Run got
	// here is covered too, unless Run got here later than that). Why: the first requests of a service
	// come right after New, and their tenants' first lease calls (Refill)
	// do not wait for a tick. When a fleet's instances all start at once,
	// those calls queue in Redis behind each other's and time out; with no
	// read out, each limiter took them for an outage and opened its
	// breaker. BenchmarkFleet/16x1000 with -fleet.coldasync (every pair's
	// first request at once) made 8,304 to 24,884 decisions by the
	// failure mode in 5 runs of 12 before, none in 6 since
	// (docs/performance.md, "Every pair at once").
	s.pollQuota(calls, s.opts.Now())
	for {
		select {
		case <-ctx.Done():
			s.stopping = nil
			s.Wait()
			return nil
		case <-tick.C:
			s.Tick(calls)
		case t := <-s.urgent:
			s.urgentRound(calls, t)
		}
	}
}

// tickEvery is the period of Run's ticks: a quarter interval, at least a
// millisecond.
func (s *Syncer) tickEvery() time.Duration {
	return max(s.planner.Config().Interval/4, time.Millisecond)
}

// nextTick returns the time (unix nanoseconds) of Run's first tick at or
// after at: a tenant whose lease calls are held back until at, and whose
// requests missed meanwhile (it stays urgent: planWith), is called for by
// the round of that tick, not by one of its own at at. It returns at
// itself before Run started its ticker, in driven mode (the caller's steps
// set the times) and for an at before the ticker started.
func (s *Syncer) nextTick(at int64) int64 {
	epoch := s.tickEpoch.Load()
	if epoch == 0 || at <= epoch {
		return at
	}
	every := int64(s.tickEvery())
	k := (at - epoch + every - 1) / every
	if k > (math.MaxInt64-epoch)/every {
		return at // beyond the clock's range: no tick to round to
	}
	return epoch + k*every
}

// Tick runs one scheduled round: it polls the quota version when due, then
// plans every tenant (but the quiet ones: see Round) and carries the plan
// out. Run calls it
// every Interval/4. It must not run concurrently with Urgent, Round,
// Wait or another Tick.
//
// Without Cluster, Tick returns once its calls have finished. In Cluster
// mode it does not wait for the calls (see Round). Nor does it wait for
// the quota version (but in driven mode without Cluster): it uses the
// version the last poll read and leaves the next poll running, so a
// quota change is seen a tick later (quotaPoll).
func (s *Syncer) Tick(ctx context.Context) {
	// What the round visits is taken before the quota's poll, which may
	// wait for Redis: in driven mode, requests that a timer wakes then
	// run beside it, and the round visits what the tick's start saw.
	all := s.reg.all
	if s.opts.Driven {
		all = slices.Values(byName(s.reg.all))
	}
	if s.capped() {
		// Each tick ranks every tenant: no set is kept (Syncer.join).
		s.round(ctx, all, s.pollQuota(ctx, s.opts.Now()), true, nil)
		return
	}
	w := &s.awake
	w.take()
	awake := w.tenants(s.opts.Driven)
	quotaCheck := s.pollQuota(ctx, s.opts.Now())
	// Every tenant when a dormant one may need the visit or the quotas
	// are re-read; else those in the set (awake.go).
	if !w.full(s.opts.Now().UnixNano(), quotaCheck) {
		if 2*len(w.set) >= s.reg.len() {
			// Most tenants awake: the registry's table is the cheaper
			// walk (a map's costs about a third more a tenant,
			// BenchmarkIdleTenantsCPU), and a dormant tenant is passed by.
			awake = all
		}
		s.round(ctx, awake, false, true, nil)
		return
	}
	s.round(ctx, all, quotaCheck, true, w.seen)
}

// Urgent runs one round over the tenants that NoteMiss queued, up to
// batchSize of them, and reports whether any was queued. It never blocks
// waiting for one; in Cluster mode it does not wait for the round's calls
// either (see Round). It must not run concurrently with Tick, Round, Wait
// or another Urgent.
func (s *Syncer) Urgent(ctx context.Context) bool {
	select {
	case t := <-s.urgent:
		s.urgentRound(ctx, t)
		return true
	default:
		return false
	}
}

// urgentRound runs a round over first and whatever else is queued, up to
// batchSize tenants.
func (s *Syncer) urgentRound(ctx context.Context, first *Tenant) {
	short := append(s.short[:0], first)
drain:
	for len(short) < batchSize {
		select {
		case t := <-s.urgent:
			short = append(short, t)
		default:
			break drain
		}
	}
	// Once each, in name order (in driven mode the order matters: the
	// order in which requests queued them is up to the scheduler). A
	// tenant is queued again by a miss after a tick took its urgency,
	// while the queue still holds it: planned twice in one round, it was
	// listed twice as kept, and the round counted it twice toward
	// MaxTenants (with MaxTenants 1, the one tenant was evicted:
	// TestUrgentRoundCountsATenantOnce).
	if len(short) > 1 {
		slices.SortFunc(short, func(a, b *Tenant) int { return cmp.Compare(a.name, b.name) })
		short = slices.Compact(short)
	}
	s.Round(ctx, slices.Values(short))
	clear(short)
	s.short = short[:0]
}
