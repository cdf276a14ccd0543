package leasequota

import (
	"context"
	"fmt"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/syncer"
)

// Per returns a Quota of n tokens per period: Rate n/period.Seconds(),
// Burst n, the lease fields left to their defaults. Per(10, time.Second)
// is 10 per second with bursts of 10; Per(1000, 24*time.Hour) is a daily
// quota of 1,000.
//
// It never panics. For n <= 0 or period <= 0 it returns Quota{Burst: n}
// (Rate 0), which Validate, New, SetQuota and a limiter resolving it from
// WithQuotaFunc reject with an error wrapping ErrInvalidQuota that names
// the field (ReasonInvalidQuota for requests).
func Per(n int64, period time.Duration) Quota {
	if n <= 0 || period <= 0 {
		return Quota{Burst: n}
	}
	return Quota{Rate: float64(n) / period.Seconds(), Burst: n}
}

// AllowAll reports whether n tokens of every tenant's quota may be spent
// now and, if so, spends n from each: all or nothing. When it denies, it
// spends nothing from any of them. Each tenant key keeps its own quota
// (WithQuotaFunc, SetQuota), its own leases and its own bound, whether
// it is spent by AllowN or AllowAll; name keys of different policies
// apart (for example "ip:"+addr and "tenant:"+id).
//
// It looks at each tenant's local lease in order, and the first that
// holds fewer than n tokens now is short before anything is spent;
// otherwise it takes n from each lease in order, and when one is short
// then (other requests took its tokens since the look), it gives back
// what it took from the earlier ones (into their leases: they are local
// counters). The short tenant decides as AllowN would: it waits for a
// lease when the syncer keeps none for it on this instance (its first,
// or one for a tenant too sparse to keep one: up to WithColdStartWait and
// ctx), or for
// a fresh lease when WithMaxWait is set; when Redis cannot be reached and
// its lease is spent, its own FailureMode decides at once, and an
// admission by its mode (which holds no leased token) stands for the rest
// of the call. If it admits, AllowAll takes n from the others again; when
// another is short then, the turn's tokens go back too and that tenant
// takes a turn. AllowAll never holds one tenant's tokens while it waits
// for another's. (Tenants holding no lease are all asked for one at
// the start, so that their leases come in together.) It denies when
// a turn denies, and when a tenant is short again after the call took
// twice as many turns as it has tenants (other requests taking the
// tokens in between), unless Redis is failing for that tenant: then its
// FailureMode decides at once, as in a turn.
//
// Decision.Tenant names the tenant that decided: the one that denied or,
// when allowed, the one with the least Remaining (of those, the one with
// the least FleetRemaining); Remaining, FleetRemaining, RetryAfter,
// Quota, Reason and Mode are its own. AllowAll makes no Redis call beyond
// leasing each tenant, and allocates nothing for up to four tenants.
//
// Bad input is denied without spending: no tenants (ReasonNoTenants), a
// tenant named twice (ReasonDuplicateTenant), n <= 0 or n above any
// tenant's Burst (ReasonInvalidN), a tenant whose quota is invalid
// (ReasonInvalidQuota); Decision.Tenant names the tenant at fault. After
// Close every decision is ReasonClosed. With one tenant, AllowAll is
// AllowN.
func (l *Limiter) AllowAll(ctx context.Context, n int64, tenants ...string) Decision {
	d, _ := l.decideAll(ctx, n, tenants, false, nil)
	return d
}

// WaitAll is AllowAll with WaitN's contract: it blocks until n tokens of
// every tenant are admitted at once and returns the admission, or until
// ctx is done (returning the denial and ctx's error, wrapped, with its
// cause if it was given one), or the limiter is closed (ErrClosed). It
// returns an error at once when the call can never be admitted: no
// tenants (ErrNoTenants), a tenant named twice (ErrDuplicateTenant),
// n <= 0 (ErrInvalidN), n above a tenant's Burst (ErrExceedsBurst), or an
// invalid quota (ErrInvalidQuota).
//
// It waits for one tenant at a time, as WaitN does (on the same wake-ups:
// a lease call for the tenant, the global bucket refilling, Redis
// answering again), holding no other tenant's tokens meanwhile; once that
// tenant admits, it takes n from the others at once, or gives every token
// back and waits for the tenant that was short. A new tenant that cannot
// be tracked (twice WithMaxTenants tracked) is waited for as WaitN waits:
// a refresh interval at a time, for eviction to make room.
func (l *Limiter) WaitAll(ctx context.Context, n int64, tenants ...string) (Decision, error) {
	return l.decideAll(ctx, n, tenants, true, nil)
}

// decideAll is AllowAll (untilAdmitted false) and WaitAll (true). noted,
// when not nil, carries the tenant entry the request's miss of n is noted
// on, as for decide: in, the one AllowAllWithin's AllowAll noted it on
// (the denying tenant's), which this call does not note again and takes
// back when it admits from that entry's lease; out, the one a denial
// leaves it noted on.
func (l *Limiter) decideAll(ctx context.Context, n int64, tenants []string, untilAdmitted bool, noted **syncer.Tenant) (Decision, error) {
	k := len(tenants)
	switch {
	case k == 1: // closed too: AllowN's denial names the tenant
		var d Decision
		if untilAdmitted {
			var err error
			d, err = l.decide(ctx, tenants[0], l.sync.Tenant(tenants[0]), n, true, nil, noted) // WaitN's
			d.Tenant = tenants[0]
			return d, err
		}
		l.allowN(&d, ctx, tenants[0], n, noted)
		return d, nil
	case l.closed.Load():
		return l.count(Decision{Reason: ReasonClosed}), l.errClosed(untilAdmitted)
	case k == 0:
		d := l.count(Decision{Reason: ReasonNoTenants})
		if untilAdmitted {
			return d, fmt.Errorf("%w: WaitAll(%d) of no tenant", ErrNoTenants, n)
		}
		return d, nil
	}
	if i := duplicate(tenants); i >= 0 {
		d := l.count(Decision{Reason: ReasonDuplicateTenant, Tenant: tenants[i]})
		if untilAdmitted {
			return d, fmt.Errorf("%w: WaitAll(%d): %q is named twice", ErrDuplicateTenant, n, truncate(tenants[i]))
		}
		return d, nil
	}
	// Look every tenant up (tracking new ones) and check n against each
	// burst before anything is spent.
	var buf [maxRefundKeys]*syncer.Tenant
	var modeBuf [maxRefundKeys]bool
	ts, byMode := buf[:0], modeBuf[:]
	if k > len(buf) {
		ts, byMode = make([]*syncer.Tenant, 0, k), make([]bool, k)
	}
	sl := sleeper{closing: l.done} // WaitAll: a wait for eviction, then a pause after quick turns
	defer sl.stop()
lookup:
	for {
		ts = ts[:0]
		for _, name := range tenants {
			e, q, err := l.track(name)
			if err != nil {
				// WaitAll, when the registry is full: as WaitN, it waits
				// for eviction and looks every tenant up again (nothing is
				// spent yet).
				d, retry, err := l.refuseOrWait(ctx, &sl, name, n, q, err, untilAdmitted)
				if !retry {
					d.Tenant = name
					return d, err
				}
				if l.closed.Load() {
					return l.count(Decision{Reason: ReasonClosed, Tenant: name}), l.errClosed(true)
				}
				continue lookup
			}
			if lim := e.Limits(); n <= 0 || n > lim.Burst {
				d, err := l.invalidN(name, n, *lim, untilAdmitted)
				d.Tenant = name
				return d, err
			}
			ts = append(ts, e)
		}
		break
	}
	sum := sumHashes(tenants)
	// Ask for a lease for every tenant that holds none, so that they
	// come in one round rather than one wait after another. A need, not a
	// miss: the tenant's demand counts this request once, when its turn
	// spends or misses below. (Noted as a miss, a cold WaitAll counted
	// twice in each tenant's demand: TestColdWaitAllCountsOnceInDemand.)
	for _, e := range ts {
		if e.Cold() && !l.sync.Failing(e) {
			l.sync.NoteNeed(e, n)
		}
	}
	var prior *syncer.Tenant // the entry an earlier decision of the request noted its miss on, until a turn takes it over
	if noted != nil {
		prior = *noted
	}
	var (
		held  = -1     // the tenant whose turn admitted n (spent), or -1
		hd    Decision // that turn's decision
		turns int      // turns taken
		quick int      // WaitAll: turns in a row admitted at once
		// byMode (above) marks the tenants their failure mode admitted
		// (Redis unreachable, lease spent): that admission holds no
		// leased token and stands for the rest of the call, so they are
		// not asked again (asked again, two of them would take turns
		// being short for ever).
		md   Decision // the latest such admission
		mdAt int      // and its tenant
		// modes counts those admissions by reason: a call that ends
		// denied takes their counts back (uncountModes), as it does a
		// held turn's (giveBackTurn).
		modes [numReasons]int32
	)
	for {
		l.turns.note(1)
		adm := admission{n: n, clock: l.sync.Clock(), sum: sum, keys: int32(k), plans: l.sync.Plans()}
		// The tenant with the least Remaining so far; of those, the one
		// with the least FleetRemaining.
		best, bestLeft, bestFleet := held, hd.Remaining, hd.FleetRemaining
		// A key seen short before anything is spent (its lease holds
		// fewer than n, or n is above its burst) takes its turn at once:
		// nothing is taken from the keys before it, so nothing goes back.
		// A give-back is exact only while their leases stand as they were
		// (giveBack): a plan between the spend and the give-back sent a
		// key's token back to Redis, and the key, its bucket known dry,
		// denied its next request (TestAllowAllLooksBeforeItSpends).
		short := visiblyShort(ts, byMode, held, n)
		spentTo := 0 // the pass spent from ts[:spentTo], but for held and byMode
		for i, e := range ts {
			if short >= 0 {
				break
			}
			if i == held {
				if i < maxRefundKeys {
					adm.front[i] = hd.adm.front[0]
				}
				continue
			}
			if byMode[i] {
				if i < maxRefundKeys {
					adm.modes |= 1 << i // nothing was leased: Refund skips it
				} else {
					adm.tailModes++ // and counts nothing for it
				}
				continue
			}
			// n against the burst as it is now, as AllowN checks it
			// before its spend: a quota lowered below n while the call
			// waited for another tenant (a turn) left this one's lease
			// holding n tokens of the old quota, and the pass spent them,
			// admitting n above its Burst
			// (TestAllowAllChecksEveryBurstAtEachPass). Short here, the
			// tenant is answered ReasonInvalidN below.
			lim := e.Limits()
			if n > lim.Burst {
				short, spentTo = i, i
				break
			}
			front := e.Front()
			// Spend counts the admission now (for n = 1 the spend is the
			// count: no atomic add): a pass that ends short takes it back.
			ok, left := e.Spend(n)
			if !ok {
				short, spentTo = i, i
				break
			}
			if i < maxRefundKeys {
				adm.front[i] = front
			}
			if best < 0 || left <= bestLeft {
				fleet := fleetRemaining(e.Level(), left, lim.Burst)
				if best < 0 || left < bestLeft || fleet < bestFleet {
					best, bestLeft, bestFleet = i, left, fleet
				}
			}
		}
		if short < 0 {
			d := hd
			if best < 0 {
				// Every tenant was admitted by its failure mode: nothing
				// was leased, nothing is refundable.
				d, best, adm = md, mdAt, admission{}
			} else if best != held {
				d = Decision{Allowed: true, Remaining: bestLeft, FleetRemaining: bestFleet, Quota: quotaOf(ts[best]),
					Reason: ReasonLeased}
			}
			d.Tenant, d.RetryAfter, d.adm = tenants[best], 0, adm
			for i, e := range ts {
				if e == prior && !byMode[i] {
					// Spent from its lease by this pass: the earlier
					// decision's miss is taken back, as a turn takes it
					// back (decide), so that the request counts once.
					e.Unmiss(n)
				}
			}
			return d, nil
		}
		// Give back what this pass took, and the turn's tokens.
		for i := range spentTo {
			if i != held && !byMode[i] {
				var front lease.GrantID // unknown beyond maxRefundKeys
				if i < maxRefundKeys {
					front = adm.front[i]
				}
				l.sync.Uncount(ts[i])
				l.giveBack(ts[i], n, front, adm.clock, adm.plans)
			}
		}
		if held >= 0 {
			l.giveBackTurn(ts[held], n, hd)
			held = -1
		}
		e := ts[short]
		if lim := e.Limits(); n > lim.Burst {
			// A quota lowered since the lookup (SetQuota, a refresh) put
			// the short tenant's burst below n: the call can never be
			// admitted. Said here, before the pause and the denial
			// below, which would first wait for tokens (or deny as for
			// a lack of them).
			l.uncountModes(&modes)
			d, err := l.invalidN(tenants[short], n, *lim, untilAdmitted)
			d.Tenant = tenants[short]
			return d, err
		}
		if !untilAdmitted && turns >= 2*k {
			// Tenants took their turns and another was short each time
			// (tokens taken by other requests in between): deny rather
			// than go on. But a tenant Redis is failing for, its lease
			// spent, is decided by its failure mode at once, as its turn
			// would (decide): denied exhausted, a FailOpen tenant was
			// refused during an outage, and a FailClosed one said
			// exhausted rather than unavailable
			// (TestAllowAllOutOfTurnsFailingTenantByItsMode). An
			// admission by its mode stands for the rest of the call, so
			// each tenant has one such turn at most: the call still ends.
			d := l.missNow(e, n, l.sync.Failing(e))
			if e != prior {
				l.sync.NoteMiss(e, n)
			}
			prior = nil // the request's miss is e's now
			d = l.count(d)
			if noted != nil {
				*noted = e
			}
			if d.Allowed {
				byMode[short] = true
				md, mdAt = d, short
				if d.Reason < numReasons {
					modes[d.Reason]++
				}
				continue
			}
			l.uncountModes(&modes)
			d.Tenant = tenants[short]
			return d, nil
		}
		turns++
		if untilAdmitted && quick > k {
			// Tokens come and go under contention: pause before the
			// next turn rather than go round without a wait.
			if err := sl.sleep(ctx, l.sleepFor(e, l.cfg.now(), n), nil); err != nil {
				l.uncountModes(&modes)
				d := l.count(l.deny(e, n))
				d.Tenant = tenants[short]
				return d, waitError(tenants[short], n, err)
			}
			quick = 0
		}
		// The turn may track the tenant anew (e evicted since the
		// lookup): the call goes on with that entry, whose lease the
		// turn spent. (Kept, the evicted entry took the turn's tokens
		// when given back, to Redis as a refund rather than into the
		// new entry's lease: TestAllowAllGivesBackToRetrackedTenant.)
		var turnNoted *syncer.Tenant // the turn takes the earlier miss over when it is e's
		if e == prior {
			turnNoted, prior = prior, nil
		}
		d, err := l.decide(ctx, tenants[short], e, n, untilAdmitted, &ts[short], &turnNoted)
		if noted != nil {
			*noted = turnNoted
		}
		if !d.Allowed {
			l.uncountModes(&modes)
			d.Tenant = tenants[short]
			return d, err
		}
		if d.Reason == ReasonLeased || d.Mode != FailDefault {
			quick++ // admitted without a wait
		} else {
			quick = 0
		}
		if d.Mode != FailDefault {
			byMode[short] = true
			md, mdAt = d, short
			if d.Reason < numReasons {
				modes[d.Reason]++
			}
			continue
		}
		held, hd = short, d
	}
}

// visiblyShort returns the first of ts, but held and those byMode marks,
// whose lease holds fewer than n tokens now, or whose burst is below n,
// or -1 for none: a pass of decideAll looks before it spends. It is a
// look, not a promise: a key it passes may still be short at its spend
// (other requests spend too), and the pass gives back as before.
func visiblyShort(ts []*syncer.Tenant, byMode []bool, held int, n int64) int {
	for i, e := range ts {
		if i != held && !byMode[i] && (e.Held() < n || n > e.Limits().Burst) {
			return i
		}
	}
	return -1
}

// giveBack returns n tokens that decideAll spent from e a moment ago
// (Spend, whose count the caller takes back, or a turn's; front, clock
// and plans read before the spend, front zero when not kept or unknown):
// into the lease at once while its oldest grant is unchanged (no batch
// left the ledger since the spend) and no drain (eviction, Close) has
// begun. Under e's lock when it is free (Syncer.CreditAt), so that what
// a plan accounted as spent meanwhile goes back into the ledger too;
// without it when a plan or a lease call holds it (Tenant.UnspendAt: if
// that plan had accounted for the spend, the next one forfeits the
// excess). Else through Refund's path
// (Syncer.GiveBack: not counted in Stats.Refunded). With the oldest grant unknown (a rate share's tokens),
// its change cannot be seen: they go back at once only if no plan ran
// since the spend (Syncer.Unspend). A plan in between could have let
// their batch expire, and given back they lived on as a later batch's,
// past their lease (TestGiveBackOfAnUnknownGrant).
func (l *Limiter) giveBack(e *syncer.Tenant, n int64, front lease.GrantID, clock int64, plans uint32) {
	switch {
	case front != 0 && (l.sync.CreditAt(e, n, front) || e.UnspendAt(n, front)):
	case front == 0 && l.sync.Unspend(e, n, plans):
	default:
		l.sync.GiveBack(e, n, front, clock)
	}
}

// giveBackTurn returns the tokens a tenant's turn (decide) admitted, and
// uncounts its admission: its lease's tokens, or nothing for an admission
// by a failure mode (a FailLocal admission's fallback token is not given
// back: the fallback bucket admits a little less, never more).
func (l *Limiter) giveBackTurn(e *syncer.Tenant, n int64, d Decision) {
	if d.Reason == ReasonLeased {
		l.sync.Uncount(e) // Spend counted it on the tenant
	} else {
		l.uncount(d)
	}
	if d.Mode != FailDefault || d.adm.n == 0 {
		return
	}
	l.giveBack(e, n, d.adm.front[0], d.adm.clock, d.adm.plans)
}

// uncountModes takes back the admissions that tenants' failure modes
// made in a call of decideAll that then denied: modes counts them by
// reason. The call is one decision, the denial; counted as well, a
// denied AllowAll showed as an admission (fail_open, fallback) too.
func (l *Limiter) uncountModes(modes *[numReasons]int32) {
	for r, c := range modes {
		if c > 0 {
			l.addCount(Decision{Allowed: true, Reason: Reason(r)}, -int64(c))
		}
	}
}

// duplicate returns the index of the second occurrence of a tenant named
// twice, or -1.
func duplicate(tenants []string) int {
	for i := 1; i < len(tenants); i++ {
		for j := range i {
			if tenants[i] == tenants[j] {
				return i
			}
		}
	}
	return -1
}
