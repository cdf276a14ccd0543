package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// A round plans every tenant it walks, and Run starts one every quarter
// interval. Most of those plans find nothing to do. An over-demanded
// tenant waits for its share of the bucket to accrue (State.notBefore):
// until then a plan observes its misses and returns, however many there
// were. At 16 instances x 1,000 such tenants, the rounds' plans took about
// a third of a core on BenchmarkFleet's two (pprof), beside the Redis they
// share it with.
//
// So a plan that asked for nothing records, in State.quiet, until when
// another plan could do no more than that (settle), and a round leaves the
// tenant alone until then when Quiet says so. The requests' misses wait in
// the Tenant (Tenant.miss saturates, it does not wrap) and the next plan
// observes them over the whole time since the last one, as the demand
// average does for any gap between plans.

// settle records in st when the next plan can first do more than observe
// the demand, after a plan at ns that returned a (see Quiet).
//
// While a call is held back (notBefore in the future, no failure, so no
// recovery may lift it), a plan returns before it looks at the level or
// the misses: it is quiet until notBefore, or until the oldest batch
// expires, whichever is first. Otherwise it is quiet until the scheduled
// refresh, or until the oldest batch counts as expiring (renewHorizon
// before it expires), but only while no token is spent nor asked for
// (Quiet): a demand that moved moves the target. A tenant that keeps no
// lease (target 0) has no refresh to wait for: holding tokens, it is
// quiet until its oldest batch expires; holding none, until it may go
// dormant.
//
// A plan with a reservation or a rate share in force, a failure, or
// anything to carry out is never quiet: those paths keep their every-tick
// plans.
func (p *Planner) settle(st *State, lim quota.Quota, ns int64, a Action) {
	st.flags &^= flagQuiet | flagQuietHeld
	if a.Calls() || a.Expire > 0 || a.Drip > 0 || st.failures > 0 || st.resv != nil {
		return
	}
	until := int64(math.MaxInt64)
	if exp, ok := st.ledger.NextExpiry(lim.LeaseTTL); ok {
		until = exp.UnixNano()
	}
	flags := flagQuiet
	if notBefore := st.at(st.notBefore); ns < notBefore {
		flags |= flagQuietHeld
		until = min(until, notBefore)
	} else {
		if p.reserves(st) {
			return
		}
		switch {
		case st.target != 0:
			until = min(until-int64(p.renewHorizon(lim)), st.at(st.next))
		case st.ledger.Total() == 0:
			// Holding nothing, and no lease to keep: until the tenant
			// may go dormant (Dormant), a plan could only observe that
			// nothing was asked for, whatever its scheduled refreshes
			// (a request that misses makes it urgent, and not quiet).
			// Planned at each of them, an instance that had seen
			// 100,000 tenants once spent about three quarters of a core
			// on them until they went dormant.
			until = max(st.at(st.next), st.at(st.lastActive)+int64(p.dormantAfter(lim)))
		default:
			// Holding tokens, and no lease to keep: its batches expire
			// and go back unrenewed, so until stays at the oldest one's
			// expiry, before which a plan could only observe that none
			// of them was spent nor more asked for (a spend or a miss
			// ends the quiet: Quiet). Planned at each scheduled refresh,
			// and at each tick of the renewal horizon, an instance whose
			// 100,000 tenants each held a first lease of a token spent
			// about a core on them.
		}
	}
	if until <= ns || until-ns > int64(24*time.Hour) {
		// Nothing to skip, or no batch and no hold to bound it (a day
		// is far more than any hold, and within a stamp's range).
		return
	}
	st.quiet = st.stampOf(until) // rounded down: quiet ends early, never late
	st.flags |= flags
}

// Quiet reports whether a plan of st at ns, with the tenant's counter at
// level and urgent set when a request ran short since the last plan,
// would do no more than observe the demand: a round may then leave the
// tenant to a later tick (see settle). It never is when a quota re-read,
// a refund or a recovery is due; the caller checks those, which are not
// in the State.
func (p *Planner) Quiet(st *State, ns, level int64, urgent bool) bool {
	if st.flags&flagQuiet == 0 || ns >= st.at(st.quiet) {
		return false
	}
	total := st.ledger.Total()
	if level > total {
		// Tokens a multi-tenant decision gave back: the plan forfeits them.
		return false
	}
	if st.flags&flagQuietHeld != 0 {
		return true
	}
	return level == total && !urgent
}

// quiet reports whether a round may leave t (locked) alone
// at now (Planner.Quiet): it has nothing but its demand to observe, no
// refund or recovery due, and it was active within half the idle timeout,
// so the idle check needs no fresh plan (its requests since its last plan
// count as activity there, as of now: idleOrKept).
func (s *Syncer) quiet(t *Tenant, now time.Time) bool {
	f := t.flags.Load()
	ls := t.lease.Load()
	if wantsPlan(f) || ls == nil || t.tokens.Back() != 0 { // nil: dormant, woken by a request, revived by its plan
		// Back: tokens failed spends put back wait for a plan to be
		// spendable again (bucket.Counter.Restore).
		return false
	}
	ns := now.UnixNano()
	return ns < s.idleCheckDue(&ls.st) && s.planner.Quiet(&ls.st, ns, t.tokens.Load(), f&flagUrgent != 0)
}

// quietUntil is what t (locked) publishes after a plan for rounds to pass
// it by without its lock (Tenant.quietUntil): until the plan settled on
// (Planner.settle), and before half the idle timeout has passed since its
// last activity, so that the idle check needs no fresh plan. While its
// next call is held back, it is quiet whatever its requests miss; else
// while its counter holds what its ledger does, no request misses and
// nothing is refunded (Planner.Quiet), which the published time carries
// as the level (quietAt). Zero when the locked check must decide: a
// ledger of quietLevels tokens or more.
func (s *Syncer) quietUntil(t *Tenant) int64 {
	st := t.st()
	if st.flags&flagQuiet == 0 {
		return 0
	}
	until := min(st.at(st.quiet), s.idleCheckDue(st))
	if st.flags&flagQuietHeld != 0 {
		return until &^ quietLevels
	}
	if total := st.ledger.Total(); total < quietLevels {
		return quietAt(until, total)
	}
	return 0
}

// quietLevels masks the low bits of a published quiet time (Tenant.
// quietUntil), which say what ends it early: 0, nothing but the time (a
// held-back tenant); 1 + L, the tenant leaving level L (Tenant.stillAt):
// a request that spends or misses, a refund, a token that comes. The time
// loses those bits, rounded down: a quiet that ends up to 255 ns early.
const quietLevels = 1<<8 - 1

// quietAt is until, no later and at most quietLevels ns earlier,
// carrying level (0 <= level < quietLevels) in its low bits.
func quietAt(until, level int64) int64 {
	return (until-level-1)&^quietLevels | (level + 1)
}

// idleCheckDue is when a tenant whose State is st must be planned again,
// quiet or not, so that its idle check (idleOrKept) sees the activity its
// misses since the last plan would record: half the idle timeout after
// its last activity.
func (s *Syncer) idleCheckDue(st *State) int64 {
	return st.at(st.lastActive) + int64(s.opts.IdleTimeout/2)
}

// wantsPlan reports whether a tenant's flags f ask for a plan whatever
// the planner said last: a refund's return is queued (Input.Refunded),
// its calls fail (Input.Recovered), or it owes a quota re-read
// (flagReread).
func wantsPlan(f uint32) bool { return f&(flagRefunded|flagFailing|flagReread) != 0 }

// passBy reports, without t's lock, whether a round may pass t by at ns:
// the time its last plan, or its going dormant, published (quietUntil) is
// after ns, and no refund, failure or quota re-read since asks for a
// plan. A held-back tenant then has nothing but misses to observe, unless
// failed spends put tokens back (Back) for a plan to make spendable; any
// other, a dormant one (reported too) at level 0 among them, has nothing
// to plan before its quiet time ends unless a request has since spent or
// missed, or tokens came (stillAt the published level). A tenant being
// planned elsewhere at that moment (a refill) is one a round would skip
// anyway. A round used to take the
// lock of each dormant tenant, tick after tick, for as long as it was
// tracked (a minute of idleness by default), and of each tenant between
// its scheduled refreshes.
func (s *Syncer) passBy(t *Tenant, ns int64) (pass, dormant bool) {
	q := t.quietUntil.Load()
	if ns >= q || wantsPlan(t.flags.Load()) {
		return false, false
	}
	dormant = t.lease.Load() == nil
	if code := q & quietLevels; code != 0 {
		return t.stillAt(code - 1), dormant
	}
	return !dormant && t.tokens.Back() == 0, dormant // held back
}
