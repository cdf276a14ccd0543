package syncer

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/telemetry"
)

// RefundHorizon is how long after its admission a refund may still name
// its grant: a GrantID holds the low 32 bits of the grant's time in
// microseconds, which Redis reads as the latest such time (they wrap every
// 71.6 minutes). A refund whose tokens may be older is forfeited instead.
const RefundHorizon = time.Hour

// noteClock records now as the time of the latest plan (raising it only).
func (s *Syncer) noteClock(now time.Time) { raise(&s.clock, now.UnixNano()) }

// noteTTLFell records that a tenant's LeaseTTL may have fallen from ttl
// at now: its quota changed (Rebase, an override), or it was evicted and
// may be tracked again under a shorter one. Refund's age of tokens
// spent before the change counts a lease lifetime, and the one in force
// at the refund understated it: a return named its grant with an age
// under 2^32 µs, and Redis took the grant for the time 2^32 µs later,
// leaving out of the peak levels after the real one
// (TestRefundAfterTheLeaseTTLFell: 3.75 tokens credited of a return owed
// none). Until the tenant's ledger has surely dropped every batch that
// the longer TTL kept (a round may pass it by until its next expiry under
// that TTL, then a round and a call), refunds whose admissions noted an
// earlier clock count ttl instead. Call it before the shorter quota is
// stored: Refund reads the quota first, then this.
func (s *Syncer) noteTTLFell(ttl time.Duration, now time.Time) {
	cfg := s.planner.Config()
	until := now.Add(ttl + 2*cfg.Interval + 2*s.opts.CallTimeout).UnixNano()
	// A window that ended RefundHorizon ago counts in no refund: the
	// admissions it covers are older than that, and forfeited whatever
	// their TTL.
	stale := now.Add(-RefundHorizon).UnixNano()
	for {
		cur := s.ttlFell.Load()
		next := new(ttlWindows)
		if cur != nil {
			*next = *cur
		}
		if !next.add(int64(ttl), until, stale) {
			return // counted already
		}
		if s.ttlFell.CompareAndSwap(cur, next) {
			return
		}
	}
}

// ttlWindows is the LeaseTTLs that fell (noteTTLFell), each counted in
// the age of refunds of admissions whose clock came before its until.
// Two at most, by falling TTL and rising until: a longer TTL's window
// that a later one with a TTL no shorter covers is dropped, and a third
// merges the two oldest (the longer TTL until the later end: an age
// overstated, never understated). Why windows apart, not the longest TTL
// until the latest end: an eviction of a tenant with the default TTL,
// hours after one with a LeaseTTL of two hours, brought the two hours
// back into every refund's age, for as long as evictions went on: a
// refund spent a second before was forfeited as older than RefundHorizon
// (TestLongLeaseTTLFellCountsOnlyInItsWindow).
type ttlWindows struct {
	ttl, until [2]int64 // zero ttl: no window
}

// add counts ttl until until in w, leaving out windows that ended before
// stale, and reports whether w changed.
func (w *ttlWindows) add(ttl, until, stale int64) bool {
	for i := range w.ttl {
		if w.ttl[i] >= ttl && w.until[i] >= until {
			return false
		}
	}
	type win struct{ ttl, until int64 }
	var all [3]win
	n := 0
	for i := range w.ttl {
		if w.ttl[i] > 0 && w.until[i] > stale && !(ttl >= w.ttl[i] && until >= w.until[i]) {
			all[n] = win{w.ttl[i], w.until[i]}
			n++
		}
	}
	all[n] = win{ttl, until}
	n++
	ws := all[:n]
	// By falling TTL; none dominates another, so their ends rise.
	slices.SortFunc(ws, func(a, b win) int { return cmp.Compare(b.ttl, a.ttl) })
	if len(ws) == 3 {
		ws[1] = win{ws[0].ttl, ws[1].until}
		ws = ws[1:]
	}
	*w = ttlWindows{}
	for i, x := range ws {
		w.ttl[i], w.until[i] = x.ttl, x.until
	}
	return true
}

// ttlFalls calls noteTTLFell when the quota in force on a tenant goes
// from old to next with a shorter LeaseTTL. t.mu must be held, and next
// not stored yet.
func (s *Syncer) ttlFalls(old, next *quota.Quota) {
	if next.LeaseTTL < old.LeaseTTL {
		s.noteTTLFell(old.LeaseTTL, s.opts.Now())
	}
}

// leaseTTLOf returns the lease lifetime Refund counts in the age of
// tokens spent after a plan at clock (unix nanoseconds): lim's, or a
// longer one a quota fell from since (noteTTLFell).
func (s *Syncer) leaseTTLOf(lim *quota.Quota, clock int64) time.Duration {
	ttl := lim.LeaseTTL
	if w := s.ttlFell.Load(); w != nil {
		for i := range w.ttl {
			if clock < w.until[i] {
				ttl = max(ttl, time.Duration(w.ttl[i]))
			}
		}
	}
	return ttl
}

// Clock returns the time of the latest plan (unix nanoseconds), zero
// before the first. A request reads it with Tenant.Front when it spends:
// every batch a plan left in a ledger expires after that plan, so the
// tokens it spends were granted less than a lease lifetime (and a round)
// before it.
func (s *Syncer) Clock() int64 { return s.clock.Load() }

// Plans returns the count of plans made, wrapping. A request that may
// give its tokens back at once (Unspend) reads it with Tenant.Front before
// it spends.
func (s *Syncer) Plans() uint32 { return s.plans.Load() }

// Unspend puts n tokens spent from t's lease a moment ago back into it
// (Tenant.UnspendWaited) when no tenant was planned since plans was read
// before the spend, and reports whether it did. It takes t's lock only
// when free, so that no plan of t runs between the check and the give-back.
// Why: a plan between the spend and the give-back counts the tokens spent
// from the ledger's oldest batch, which may then expire and leave; given
// back, they lived on as a later batch's, past their lease. With the
// oldest grant's ID known, its change tells (Refund); without it (a rate
// share's tokens), only this does. When it reports false, the caller
// refunds (Refund) instead.
func (s *Syncer) Unspend(t *Tenant, n int64, plans uint32) bool {
	if !t.mu.TryLock() {
		return false
	}
	defer s.unlock(t)
	if s.plans.Load() != plans || t.flag(flagEvicted) || s.closing() {
		// A plan ran, or the tenant was drained (evicted, or at Close):
		// tokens put back into a drained counter would be lost uncounted.
		return false
	}
	t.UnspendWaited(n)
	return true
}

// Uncount takes back the count of an admission Spend made from t's lease,
// for a multi-tenant decision that gave its tokens back. The count is
// t's until t is evicted, and then the syncer's: eviction moves a
// tenant's admissions to a total of the evicted (registry.remove), and
// an admission taken back after that comes off the total. (Taken off the
// evicted tenant, it was lost: LeaseTotals counted an admission given
// back; TestEvictedAdmissionsCountOnce.) It is lock-free: two atomic adds
// on t.
func (s *Syncer) Uncount(t *Tenant) {
	if !t.uncount() {
		s.reg.evictedAdmits.Add(-1)
	}
}

// ForfeitRefund counts n refunded tokens that the caller could not give
// back (their tenant evicted and not tracked again): refunded and
// forfeited, as Refund counts those whose grant nothing can name.
func (s *Syncer) ForfeitRefund(n int64) {
	if n > 0 {
		s.refunded.Add(n)
		s.forfeited.Add(n)
	}
}

// CreditAt puts n tokens spent from t's lease back into it, and reports
// whether it did: only while t's lock is free (it is taken, never waited
// for), front (not zero; Tenant.Front read before the spend) is still the
// ledger's oldest grant, and t is not drained (evicted, or at Close). The
// tokens then came from batches the ledger still holds, and what a plan
// since the spend accounted as spent goes back to its oldest batch, which
// expires no later than theirs: nothing is forfeited. (Given back without
// the lock, Tenant.UnspendAt, tokens whose spend a plan had accounted for
// were more than the ledger held, and the next plan forfeited them: a
// denied AllowAll left a tenant's lease a token short,
// TestCreditAtKeepsWhatAPlanAccounted.) When it reports false it gave
// back nothing. A plan that holds the lock when the tokens come back may
// have accounted for their spend already: a lock-free give-back then
// still loses them to the next plan's forfeit, the bound kept.
func (s *Syncer) CreditAt(t *Tenant, n int64, front lease.GrantID) bool {
	if n <= 0 || front == 0 || !t.mu.TryLock() {
		return false
	}
	defer s.unlock(t)
	// A dormant tenant's ledger is empty: front left it.
	ls := t.lease.Load()
	if ls == nil || t.flag(flagEvicted) || s.closing() || ls.st.ledger.frontID() != front {
		return false
	}
	level := t.credit(n)
	// No more than the n given back: the counter may hold more than the
	// ledger for other reasons (a lock-free give-back after a plan, a
	// failed split spend's put-back after its batch expired), which the
	// next plan forfeits; taken into the oldest batch, they lived on as
	// its tokens (TestRefundKeepsNoExcess).
	ls.st.ledger.credit(min(n, level-ls.st.ledger.Total()))
	return true
}

// Refunded says what became of a refund.
type Refunded uint8

const (
	// RefundCredited: the tokens went back into the tenant's lease here.
	RefundCredited Refunded = iota + 1
	// RefundReturned: the lease they came from is gone (expired, drained
	// or spent past): they are returned to Redis with the next round, or
	// before the tenant's next urgent refill if that comes first, naming
	// their grant, as expired tokens are.
	RefundReturned
	// RefundForfeited: nothing can name their grant (unknown, or older
	// than RefundHorizon allows): they are dropped, as if spent.
	RefundForfeited
)

// Refund gives back n tokens spent from t's lease for work not done. front
// is t.Front() read before the spend, and clock s.Clock() then.
//
// When the ledger's oldest grant is still front, no batch has left it
// since the spend, so the tokens came from batches it still holds and they
// go back into the counter (and, for what the ledger had already
// accounted as spent, into its oldest batch, which expires no later than
// theirs): RefundCredited. Otherwise they are returned to Redis naming
// front, which is no later than their grant (so Redis credits no more than
// their due), with an age bound from clock: RefundReturned. With front or
// clock unknown, or the spend too old, they are forfeited.
//
// It takes t's lock only when free: while a lease call holds it, the
// tokens are returned instead (never a wait on the request path).
func (s *Syncer) Refund(t *Tenant, n int64, front lease.GrantID, clock int64) Refunded {
	if n > 0 {
		s.refunded.Add(n)
	}
	return s.GiveBack(t, n, front, clock)
}

// GiveBack is Refund without the count of Stats.Refunded: for tokens a
// multi-tenant decision spent and gives back as it ends denied (the
// caller's give-back could not put them back into the lease), which no
// Refund call gave back. (Counted, Stats.Refunded, the tokens given back
// by Refund, grew on a denied AllowAll: TestGiveBackIsNotARefund in the
// root package.)
func (s *Syncer) GiveBack(t *Tenant, n int64, front lease.GrantID, clock int64) Refunded {
	if n <= 0 {
		return 0
	}
	lim := t.Limits()
	// The tokens were granted after the latest plan before the spend
	// minus a lease lifetime (the longest in force since: leaseTTLOf;
	// a round and a call may pass between a plan
	// and its expiries), and, reserved, up to a reservation's wait (at
	// most lease.ReserveAhead) and twice its length before they came due
	// (Redis names the grant by front whatever the age, which only keeps
	// it under RefundHorizon): an upper bound of their age.
	now := s.opts.Now()
	cfg := s.planner.Config()
	age := time.Duration(now.UnixNano()-clock) + s.leaseTTLOf(lim, clock) + 2*cfg.Interval + 2*s.opts.CallTimeout
	if cfg.Reserve > 0 {
		age += lease.ReserveAhead + 2*cfg.Reserve
	}
	if front == 0 || clock == 0 {
		s.forfeited.Add(n)
		return RefundForfeited
	}
	if s.CreditAt(t, n, front) {
		return RefundCredited
	}
	if age >= RefundHorizon || age < 0 {
		// Redis could take front for a later grant (long leases, or an
		// old admission): forfeit rather than over-credit.
		s.forfeited.Add(n)
		return RefundForfeited
	}
	r := lease.ReleaseRequest{Tenant: t.name, Limits: t.bucket(), Amount: n, Age: age, Grant: front}
	if !s.queue(now, r) {
		// Close's ReleaseAll made the queue's returns already.
		s.forfeited.Add(n)
		return RefundForfeited
	}
	// After the return is queued: a round that sees the flag also takes
	// the return, and makes it before its acquires, so a plan that lets
	// the tenant call while its bucket was dry finds the tokens there.
	t.setFlag(flagRefunded, true)
	s.wake(t)
	return RefundReturned
}

// returnQueued makes the queued returns of t's tokens now, to node, the
// node that serves t (a refill does, before its acquire). A round leaves
// them queued while t is locked (takePending); the queue may still hold
// none when a round took a return queued just before the refund set
// flagRefunded, and then made it first thing, before its acquires. When
// it makes a return it begins the refill's span (urgent, with links), the
// return's parent, and returns it with its context for the acquire; else
// ctx and nil.
func (s *Syncer) returnQueued(ctx context.Context, t *Tenant, node *redisNode, links []trace.Link) (context.Context, *telemetry.Round) {
	now := s.opts.Now()
	mine := s.takeQueued(nil, now, func(tenant string) bool { return tenant == t.name })
	if len(mine) == 0 {
		return ctx, nil
	}
	ctx, round := s.opts.Telemetry.StartRound(ctx, true, links...)
	round.Returned, _ = s.release(ctx, round, node, mine, 0, now) // what fails is forfeited, as in a round
	return ctx, round
}
