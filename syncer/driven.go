package syncer

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"
)

// Driven mode (Options.Driven) is for a caller that runs the loop's steps
// itself, a deterministic simulation: it must see every step do the same
// on a replay of the same schedule. So in driven mode nothing the Syncer
// does depends on how goroutines are scheduled:
//
//   - Refill starts no goroutine: it queues the refill, and the caller
//     runs the queue with Refills, between its other steps.
//   - What would wake waiting requests in the middle of a step (a refill's
//     answer, Recovered) is held until Deliver, which the caller calls
//     when its step is over, so that no request runs beside a step.
//   - Rounds, urgent rounds, queued refills and ReleaseAll visit tenants
//     in name order, not in map order, and pipelines are sent one after
//     the other.
//
// Run, in production, does none of this.

// driven is the state of driven mode.
type driven struct {
	mu        sync.Mutex               // guards the fields below
	queue     map[string]*queuedRefill // refills waiting for Refills, by tenant
	answers   []answer                 // held until Deliver
	recovered bool                     // a Recovered broadcast held until Deliver
	closed    bool                     // Close ran: refills are answered at once
	spare     []*queuedRefill          // reused by Refills
	_         [0]func()                // not comparable
}

// queuedRefill is a refill waiting in driven mode's queue; callers that
// ask for the same tenant join it.
type queuedRefill struct {
	t       *Tenant
	need    int64 // the largest need of its callers
	link    trace.Link
	waiters []chan singleflight.Result
}

// answer is a refill's result for one waiter.
type answer struct {
	ch  chan singleflight.Result
	err error
}

// queueRefill is Refill in driven mode. A caller joining a queued refill
// raises its need, so the need does not depend on which caller came
// first.
func (s *Syncer) queueRefill(ctx context.Context, t *Tenant, need int64) <-chan singleflight.Result {
	ch := make(chan singleflight.Result, 1)
	d := &s.driven
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		ch <- singleflight.Result{Err: ErrClosed}
		return ch
	}
	q := d.queue[t.name]
	if q == nil {
		if d.queue == nil {
			d.queue = map[string]*queuedRefill{}
		}
		q = &queuedRefill{t: t, link: trace.LinkFromContext(ctx)}
		d.queue[t.name] = q
	}
	q.need = max(q.need, need)
	q.waiters = append(q.waiters, ch)
	return ch
}

// Refills runs the refills queued (Options.Driven) in tenant name order,
// and reports whether there were any. Their answers wait for Deliver. A
// refill whose tenant is locked (Cluster mode: a call in flight) stays
// queued for the next Refills. It must not run concurrently with Tick,
// Urgent, Round, Wait or another Refills.
func (s *Syncer) Refills(ctx context.Context) bool {
	d := &s.driven
	d.mu.Lock()
	qs := d.spare[:0]
	for _, q := range d.queue {
		qs = append(qs, q)
	}
	clear(d.queue)
	d.mu.Unlock()
	slices.SortFunc(qs, func(a, b *queuedRefill) int { return cmp.Compare(a.t.name, b.t.name) })
	for _, q := range qs {
		if q.t.flag(flagEvicted) {
			// Queued by name, it may have been joined by requests of
			// the tenant made anew with the name since: refill that
			// one, as refill does (TestDrivenRefillJoinedAcrossEviction).
			if t := s.reg.load(q.t.name); t != nil {
				q.t = t
			}
		}
		if !q.t.mu.TryLock() {
			s.requeue(q)
			continue
		}
		err := s.refillLocked(ctx, q.link, q.t, q.need)
		q.t.mu.Unlock()
		s.unlocked.Broadcast()
		d.mu.Lock()
		for _, ch := range q.waiters {
			d.answers = append(d.answers, answer{ch, err})
		}
		d.mu.Unlock()
	}
	clear(qs)
	d.mu.Lock()
	d.spare = qs[:0]
	d.mu.Unlock()
	return len(qs) > 0
}

// requeue puts q back in the queue, merging it with a refill queued for
// the same tenant since.
func (s *Syncer) requeue(q *queuedRefill) {
	d := &s.driven
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.queue == nil {
		d.queue = map[string]*queuedRefill{}
	}
	if later := d.queue[q.t.name]; later != nil {
		q.need = max(q.need, later.need)
		q.waiters = append(q.waiters, later.waiters...)
	}
	d.queue[q.t.name] = q
}

// Deliver hands the requests waiting on refills their answers, and wakes
// those waiting on Recovered, as held since the last Deliver (driven
// mode; without it, answers and wake-ups are not held and Deliver does
// nothing). The caller calls it at the end of each step.
func (s *Syncer) Deliver() {
	d := &s.driven
	d.mu.Lock()
	answers := d.answers
	d.answers = nil
	recovered := d.recovered
	d.recovered = false
	d.mu.Unlock()
	// Recovered first, as Run's refills broadcast it during their call,
	// before they answer: a request woken by an answer then waits, if it
	// must, for the next recovery, not for this one.
	if recovered {
		s.recovered.Broadcast()
	}
	for _, a := range answers {
		a.ch <- singleflight.Result{Err: a.err}
	}
}

// closeDriven answers every queued refill with ErrClosed, and every later
// one at once. The answers still wait for Deliver: the caller delivers
// them once its tokens are returned (ReleaseAll), so that a request woken
// by Close does not race the drain for the tokens.
func (s *Syncer) closeDriven() {
	d := &s.driven
	d.mu.Lock()
	d.closed = true
	for _, q := range d.queue {
		for _, ch := range q.waiters {
			d.answers = append(d.answers, answer{ch, ErrClosed})
		}
	}
	clear(d.queue)
	d.mu.Unlock()
}

// byName returns the tenants of seq sorted by name, for driven mode.
func byName(seq func(func(*Tenant) bool)) []*Tenant {
	var ts []*Tenant
	for t := range seq {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *Tenant) int { return cmp.Compare(a.name, b.name) })
	return ts
}
