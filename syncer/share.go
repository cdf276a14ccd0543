package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/internal/rateshare"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// Rate shares (Config.SharePeriod; docs/design.md, "Rate shares"). A
// scarce tenant's instance asks Redis for a rate share (lease.ShareAsk):
// s tokens a second until the end of the tenant's epoch, or of the next
// one when granted in an epoch's second half, which the bucket no longer
// refills. The instance accrues it here as a reservation that Redis never
// debited (reservation.shared): token k comes due k/pace after the
// share's window opened in the local clock, no earlier than the share
// accrued it. It then calls Redis about once a period for the tenant,
// to renew the share before it ends, whatever its demand: while the
// share's tokens are to come they count as held, so the planner asks for
// no lease of tokens (Plan), and requests that find the counter empty
// wait for the next token to come due.
//
// The bound. The bucket and the shares in force make Rate tokens a second
// together (lease.RefillShares), so a share's token spent here is one the
// bucket did not refill. LocalWindow maps the share into the local clock
// so that a slow reply only shortens it, and the pace is the share less
// the clocks' drift (shareDrift), so no token comes due before the share
// accrued it in Redis's clock. An accrued token joins the ledger like a
// leased one: it expires LeaseTTL after it came due (the share's Hold: the
// L of the window bound), and is then forfeited, not returned
// (Planner.ReturnsExpired): Redis never debited it, so an aged return
// would credit little and cost a call. (A drain at eviction or Close that
// includes such tokens names no grant and is aged from before the call
// that asked for the share, older than the token, so Redis credits it no
// more than it would a token leased then.) Before a call that ends or replaces the
// share (a renewal asks again, and Redis replaces the share), the
// accrual stops: at the plan, before the call reaches Redis. A renewal
// not sent gives it back (State.uncut): Redis holds the share still.

// heldShare is a rate share as Redis reported it (lease.RateShare): its
// rate, and its From and Until in Redis's clock, in microseconds.
type heldShare struct {
	rate        float64
	from, until int64
	// under is the quota's rate when the share was granted. Once the
	// rate in force is below it (SetQuota lowered it), the share ends at
	// once (Shared, or the first plan that sees it, stops its accrual;
	// shareOp ends it): Redis keeps the
	// shares in force through a quota change, and the instances went on
	// handing out the old shares until their renewals, up to 1.5 periods
	// (4,669 tokens in 5 s after a rate of 1,000 went to 10, where the
	// bound after a change allows 260: TestShareEndsWhenTheRateFalls).
	// Rounded down to a float32: a fall by less than that is missed.
	under float32
	// end is the share's end in the local clock (its LocalWindow's until,
	// rounded down), which renewAt counts back from. Why not the last
	// token's due time: a share of a token or two a period comes due
	// whole up to a token's time before it ends, and renewed counting
	// back from there, the renewal came in the epoch's first half, which
	// grants a share to that epoch's end only, renewed again at every
	// tick (TestSmallShareRenewedOncePerPeriod).
	end stamp
}

// shareDrift is the most the local clock's rate may differ from Redis's,
// as a fraction: a share accrues here at its rate less this, over a
// window shortened by it (LocalWindow). 1000 ppm, ten times what NTP
// keeps a server's clock within.
const shareDrift = 1e-3

// share returns the rate share st's tenant accrues, nil for none.
func (st *State) share() *heldShare {
	if st.resv == nil {
		return nil
	}
	return st.resv.shared
}

// shareLive reports whether st's tenant holds a rate share (accrued here,
// or stopped for its end) whose end, in the local clock, is after ns.
func (st *State) shareLive(ns int64) bool {
	sh := st.share()
	return sh != nil && ns < st.at(sh.end)
}

// HeldShare returns the rate share the tenant holds (accrued here), and
// false for none.
func (st *State) HeldShare() (lease.RateShare, bool) {
	sh := st.share()
	if sh == nil {
		return lease.RateShare{}, false
	}
	return lease.RateShare{Rate: sh.rate, From: time.UnixMicro(sh.from), Until: time.UnixMicro(sh.until)}, true
}

// shareTerms returns the terms of st's tenant's shares asked for at ns:
// Config.SharePeriod and SharePeriod's phase from the tenant's hash, its
// LeaseTTL as the hold, Config.ShareHeadroom, and, while the tenant is
// younger here than a registry window, the instances it is expected to
// have (lease.ShareTerms.Instances): the most Redis reported on it or on
// any tenant here, or Options.Instances when larger (fleet, Input.Fleet;
// the limiter's WithExpectedInstances). Why: the
// instances of a fleet that start together register with their first
// calls one by one, and a share asked for then was sized among those
// registered so far, so the first askers took the rate and the last were
// refused until the first renewed, calling for tokens from a bucket the
// shares had dried meanwhile. BenchmarkFleet/16x1000 with
// -fleet.shares=10s -fleet.coldasync made 0.32 script runs a pair and
// second with the cap against 0.57 and 0.80 without it, at 0.12-0.16 of
// redis_rate's Redis CPU against 0.23-0.34 (docs/performance.md). Past the window
// every instance of the tenant is registered, and its max-min fair share
// alone sizes a share: an even part would hold an instance of more demand
// than the others below its fair share.
func (p *Planner) shareTerms(st *State, lim quota.Quota, ns int64, fleet int) lease.ShareTerms {
	per := p.cfg.SharePeriod.Microseconds()
	phase := hashPhase(st.hash, per)
	t := lease.ShareTerms{
		Period:   time.Duration(per) * time.Microsecond,
		Phase:    time.Duration(phase) * time.Microsecond,
		Hold:     max(lim.LeaseTTL, time.Millisecond),
		Headroom: p.cfg.ShareHeadroom,
	}
	// Young: for a registry window of lease lifetimes, the time a fleet
	// starting together takes to register, not Config.Window, which rate
	// shares stretch to two periods (up to 2 h): a tenant on 2 instances
	// beside one on 64 asked for a 64th of its rate for that long
	// (TestShareAskYoungnessFollowsRegistrationNotSharePeriod).
	young := min(p.cfg.Window, RegistryWindow(lim.LeaseTTL, p.cfg.Interval, 0))
	if p.cfg.Window > 0 && p.age(st, st.stampOf(ns)) < young {
		t.Instances = min(max(int(st.instances), fleet), lease.MaxShareInstances)
	}
	return t
}

// wantsShare reports whether st's tenant should hold a rate share: shares
// are on, a lease call has succeeded (the first one registers this
// instance, so that a share is sized among the instances starting with
// it), its demand would accrue a token in a lease lifetime, and the
// tenant is scarce (the last call got less than it asked for, or Redis's
// fair share for this instance was below its demand: the instances
// together ask for more than the rate) or holds a share already. A
// renewal asks for the fair share of the demand then, so a share follows
// the demand down; it ends once the demand is gone.
func (p *Planner) wantsShare(st *State, lim quota.Quota) bool {
	return p.cfg.SharePeriod > 0 && st.flags&flagGranted != 0 &&
		(st.flags&(flagScarce|flagShort) != 0 || st.share() != nil) &&
		st.Demand()*lim.LeaseTTL.Seconds() >= 1
}

// renewAt returns when a call should renew or end st's share sh: two
// intervals, but at most three eighths of the period, and a jitter of up
// to a twentieth of the period before its end (heldShare.end), so that
// a round's call reaches Redis before the share ends, and the instances
// of a tenant do not renew together. Why at most 3/8 of the period: a
// share ends with an epoch, and a renewal made in an epoch's first half
// gets a share to that epoch's end only, which the next plan renews
// again. With two intervals above half a period (WithRefreshInterval of
// 500 ms, a period of 1 s) every renewal came in a first half: a call
// every tick for each tenant, and each new share restarting its accrual
// from the reply, so that a share slower than a token a tick never
// handed out a token (8.311 calls a pair and second, 0.439 of the rate for
// the least tenant of TestShareRenewalWithLongIntervals; 0.955 and 0.966
// now). 3/8 keeps the renewal an eighth of the period past the epoch's
// middle (less the jitter), for the call's way and the clocks' drift.
func (p *Planner) renewAt(st *State, sh *heldShare) int64 {
	span := int64(p.cfg.SharePeriod / 20)
	lead := min(int64(2*p.cfg.Interval), int64(p.cfg.SharePeriod)*3/8)
	return st.at(sh.end) - lead - p.jitter(st, sh.from, span)
}

// endAfter returns when a call may end st's share sh, whose demand was
// found gone at ns: after a jitter of up to a quarter period. Why: the
// demand of a whole fleet can stop at once (the load behind it stopped),
// and every instance's estimate of it decays alike, so without the jitter
// every instance ended each of its shares in the same round trip: at 32
// instances x 2,000 tenants, 64,000 ends at once, which timed out on one
// Redis. BenchmarkFleet/32x2000 with -fleet.shares=10s, its limiters left
// open 8 s after the load stopped (a pause added for the measurement, not
// kept), counted 52,864 failed lease calls in all without the jitter and
// 4,854 with it. Spread over a quarter period, the ends come at about the
// pace of the renewals. Meanwhile the share stays in force in Redis,
// unspent, as it would without the end until its epoch ended. The time is
// kept in shareAfter (no ask is made while a share is held), flagEnding
// saying it was set for this share; a demand back before it clears the
// flag.
func (p *Planner) endAfter(st *State, sh *heldShare, ns int64) int64 {
	return ns + p.jitter(st, sh.from^0x5bd1e995, int64(p.cfg.SharePeriod/4))
}

// ReturnsExpired reports whether the tokens that plan a of st's tenant
// expired (a.Expire) go back to Redis in a release; refilled says whether
// the tenant's bucket, as the last lease call (or a return since) saw it,
// has refilled to its burst since (leaseState.refilled). They do not when
// it has and the tenant is neither scarce nor short (its instances
// together ask for less than its rate, as Redis last said): a return to a full bucket is
// credited nothing (release.lua credits what the bucket would hold had
// the tokens never been leased, at most its burst), so the call is
// wasted, and forfeiting credits less, never more. Why: a pair that
// spends a token a second or two (tenants within their quota on many
// instances) holds a lease of a token that expires more often than not;
// its returns made 2,248 of the 6,768 script runs a second of
// TestFleetSimulation's small fleet (5,432 without them). With rate shares on, those of
// unnamed batches (a.ExpiredGrant zero: what a share accrued, and tokens
// of a grant whose ID is unknown) do not: they are forfeited, credited
// less, never more. Why: a share's tokens were never debited from the
// bucket, so an aged return credits little of them (at 32 x 2,000 about
// a tenth of what went back), while it costs a call per plan of every
// pair whose share outran the requests it was delivered: at 32 x 2,000
// over 8 s (BenchmarkFleet/32x2000, -fleet.shares=10s) those returns
// made about a third of the EVALSHA calls, and timed out by thousands at
// the start (3,071 to 55,563 failed calls in nine runs; 51 to 567 in five
// without them).
func (p *Planner) ReturnsExpired(st *State, a Action, refilled bool) bool {
	if refilled && st.flags&(flagScarce|flagShort) == 0 {
		return false
	}
	return a.ExpiredGrant != 0 || p.cfg.SharePeriod <= 0
}

// shareOp returns the share operation for a call planned at ns, and
// whether the call is due for it alone (a renewal or an end): an ask
// otherwise goes with a call made for tokens.
func (p *Planner) shareOp(st *State, lim quota.Quota, ns int64) (op lease.ShareOp, due bool) {
	if p.cfg.SharePeriod <= 0 {
		return lease.ShareKeep, false
	}
	sh := st.share()
	if sh != nil && (lim.Rate < float64(sh.under) || st.resv.pace == 0) {
		// The rate fell (see heldShare.under), or the share is being
		// ended (stopShare; Shared when the rate fell): its end goes, again
		// if an earlier one was refused or failed. Why again: a stopped
		// share whose demand came back asked for no end and, its pace 0,
		// for no renewal either (renewAt is never): no call, no token, for
		// good (TestStoppedShareEndsWhenDemandReturns).
		return lease.ShareEnd, true
	}
	if sh != nil && !p.wantsShare(st, lim) {
		// The demand is gone: end the share, rather than let its tokens
		// accrue until the renewal and expire, after a jitter (endAfter).
		if st.flags&flagEnding == 0 {
			st.flags |= flagEnding
			st.shareAfter = st.stampCeil(p.endAfter(st, sh, ns))
		}
		if ns < st.at(st.shareAfter) {
			return lease.ShareKeep, false
		}
		return lease.ShareEnd, true
	}
	st.flags &^= flagEnding // no share held, or its demand is back
	if sh != nil {
		if ns < p.renewAt(st, sh) {
			return lease.ShareKeep, false
		}
		return lease.ShareAsk, true
	}
	if p.wantsShare(st, lim) && ns >= st.at(st.shareAfter) {
		return lease.ShareAsk, false
	}
	return lease.ShareKeep, false
}

// cutShare stops st's share's accrual (its tokens due by the plan have
// come due): before a call that replaces it reaches Redis. It returns the
// share's From, for the call to name, and the accrual it stopped, for
// uncut to give back should the call not be made.
func (st *State) cutShare() (time.Time, *reservation) {
	sh := st.share()
	if sh == nil {
		return time.Time{}, nil
	}
	r := st.resv
	st.resv = nil
	return time.UnixMicro(sh.from), r
}

// uncut gives back the share's accrual r that cutShare stopped for a call
// that was not made (the call budget refused it, the circuit breaker did,
// or Run ended first): Redis holds the share still, until its end, and
// withholds its rate from the bucket meanwhile. It accrues here as it did
// before the cut, its tokens coming due at the same times and none after
// its window's end (LocalWindow, as Redis reported the share), and the
// next plan renews it again (renewAt has passed). Why: left cut, the
// share's last tokens, two intervals and a jitter of them, never came due
// here while Redis counted them as this instance's, and no renewal was
// planned again until the tenant's next call for tokens
// (TestSkippedRenewalKeepsTheShare). Nothing to give back when r is nil
// or st holds a reservation again.
func (st *State) uncut(r *reservation) {
	if r != nil && st.resv == nil && (r.left > 0 || r.shared != nil) {
		st.resv = r
	}
}

// stopShare stops st's share's accrual (pace 0) but keeps it known until
// a reply says Redis ended it (Shared): before a call that ends it. It
// returns the share's From, for the ShareEnd to name. Why not cutShare:
// when the call budget refused the end (Skipped), the planner no longer
// knew the share, no later plan ended it, nor did Close, and Redis kept
// it in force, unspent, until its epoch ended, refilling the bucket
// that much less (TestSkippedShareEndIsMadeAgain).
func (st *State) stopShare() time.Time {
	sh := st.share()
	if sh == nil {
		return time.Time{}
	}
	st.resv.pace = 0
	return time.UnixMicro(sh.from)
}

// Shared records the rate share that a lease call's reply says this
// instance holds (g.RateShare), the call having been planned at sent
// with share operation op and its reply having arrived at arrived (local
// clock). A share it accrues already goes on; a share it did not know
// accrues from arrived over its LocalWindow when this call asked for it
// (op is lease.ShareAsk: Redis granted it under the quota the reply
// brings), and is otherwise ended (see learnt, below); none stops the
// accrual. An ask refused is not made again for a quarter of a period,
// and while replies grant nothing from an empty bucket, no call for
// tokens is made before it either (awaitAsk).
func (p *Planner) Shared(st *State, lim quota.Quota, op lease.ShareOp, sent, arrived time.Time, g lease.Grant) {
	p.SharedAfter(st, lim, op, sent, arrived, g, nil)
}

// awaitAsk holds back the calls of st's tenant until its next ask for a
// share (shareAfter) when an ask was refused and the reply g, at ns,
// granted nothing from a bucket it found empty; at most creditWait, past
// which a wait gains no credit at Redis. Why: Redis refuses an ask when
// the shares in force hold the rate (less the headroom), and the bucket
// then refills at what they leave: a call for tokens before the shares
// end finds it empty again. Granted nothing, a pair came back for a
// token's worth of its credit (shareWait), many times a second at fleet
// scale while the first shares of a fleet still registering held the
// rate (docs/performance.md, "A refused ask waits for the next", has
// the counts and the cost). A bucket that a rollout's older clients keep
// from granting shares at all refills at the rate, and a pair waits no
// longer than its credit takes to span there either.
func (p *Planner) awaitAsk(st *State, lim quota.Quota, ns int64, g lease.Grant) {
	if st.resv != nil || st.flags&flagEnding != 0 || g.Granted > 0 || !(g.Tokens < 1) || !(g.Share > 0) ||
		ns >= st.at(st.shareAfter) {
		return
	}
	wait := min(time.Duration(st.at(st.shareAfter)-ns), p.creditWait(lim, g.Share))
	st.setClock(ns)
	st.notBefore = max(st.notBefore, st.stampCeil(ns+int64(wait)))
}

// SharedAfter is Shared for a call whose plan cut the share's accrual
// (Action.cut, cutShare; nil for none): the part of a token the cut
// share had accrued here by the plan and not handed out carries over to
// the share the reply reports (carried). Why: each renewal restarts the
// accrual from the reply, and the old share's progress toward its next
// token was lost, half a token a renewal on average, about once a period:
// small shares lost half their rate (tenants of a rate of 8 on 4
// instances, 3 times over, period 1 s: 0.469 of the rate for the least
// in TestShareRenewalKeepsTheFraction, 0.975 with the carry; a rate of
// 4 and a period of 2 s: 0.487, 0.988). TestShareRenewalCarryNeverEarly
// holds the carry to the shares' accrual in Redis's clock.
func (p *Planner) SharedAfter(st *State, lim quota.Quota, op lease.ShareOp, sent, arrived time.Time, g lease.Grant, cut *reservation) {
	rs := g.RateShare
	cur := st.share()
	if cur != nil && lim.Rate < float64(cur.under) {
		// The quota's rate fell since the share was granted (the reply
		// brought the override): no more of its tokens come due (pace
		// 0; left, the share stays known for the end to name it), and
		// the next plan ends it (shareOp).
		st.resv.pace = 0
	}
	if !rs.Held() {
		if cur != nil {
			st.resv = nil
		}
		ns := arrived.UnixNano()
		if op == lease.ShareAsk {
			st.setClock(ns)
			st.shareAfter = st.stampCeil(ns + int64(p.cfg.SharePeriod/4))
		}
		p.awaitAsk(st, lim, ns, g)
		return
	}
	from, until := rs.From.UnixMicro(), rs.Until.UnixMicro()
	if cur != nil && cur.rate == rs.Rate && cur.from == from && cur.until == until {
		return
	}
	if st.resv != nil && cur == nil {
		// A reservation's tokens still to come: Redis grants no share
		// while one is in force (and none with Config.Reserve, which
		// shares replace), so this is a share the reply reports that
		// this instance did not ask for; leave it.
		return
	}
	// The store's clock at the call is the reply's time less its wait:
	// on a bucket frozen ahead of the clock by reservations, the share
	// starts at the bucket's time, g.Wait after the clock.
	lf, lu := rateshare.LocalWindow(sent.UnixMicro(), arrived.UnixMicro(), g.ServerTime.Add(-g.Wait).UnixMicro(),
		rateshare.Share{Rate: rs.Rate, From: from, Until: until}, shareDrift)
	pace := rs.Rate * (1 - shareDrift)
	q := carried(cut, st.stampOf(sent.UnixNano()))
	tokens := math.Floor(pace*float64(lu-lf)/1e6 + q)
	if !(tokens >= 1) {
		st.resv = nil
		return
	}
	ns := arrived.UnixNano()
	st.setClock(ns)
	// The carried part q comes first: token k is due (k - q)/pace after
	// the window opens, the shift rounded down (a token due later, never
	// earlier).
	start := st.stampCeil(lf*1000) - stamp(math.Floor(q*1000/float64(down32(pace))))
	st.resv = &reservation{
		start:   start,
		granted: st.stampOf(sent.UnixNano()),
		left:    int32(min(tokens, math.MaxInt32)),
		pace:    down32(pace),
		// No grant ID: the ledger orders batches by their grants' IDs,
		// and a drip named by the share's From, seconds before it came
		// due, would go in front of the leases granted since and expire
		// with the oldest of them (a batch's stamp is lowered to a later
		// one's), a TTL after the share's first drip. Unnamed, it is
		// ordered by its stamp, and a return of it is aged from its
		// stamp less the drip lag (how long before coming due a dripped
		// token was granted: since the ask was planned), which reaches
		// back past the share's From.
		shared: &heldShare{rate: rs.Rate, from: from, until: until, under: down32(lim.Rate), end: st.stampOf(lu * 1000)},
	}
	if op != lease.ShareAsk {
		// Learnt: a share this call did not ask for, which an earlier
		// call was granted (its reply lost, or the tenant tracked anew
		// after an eviction, or the process restarted under the same
		// instance id). The rate it was granted under is not known
		// here, and Redis keeps a share in force through a quota
		// change: recorded as granted under the rate the reply
		// brought, a share of 950 a second granted under a rate of
		// 1,000 came due here after the rate went to 10 until its end,
		// 4,650 tokens in 5 s where the bound after a change allows 260
		// (TestLearntShareEndsWhenGrantedUnderAHigherRate). None of its
		// tokens come due (pace 0), and the next plan ends it
		// (shareOp), giving its rate back to the bucket; an ask after
		// that is sized under the rate in force.
		st.resv.pace = 0
	}
}

// carried returns the part of a token that the share accrual cut at stamp
// at (the plan that cut it: its tokens due by then had come due) had
// accrued and not handed out, in [0, 1); 0 for none. The share accrued it
// in Redis's clock no later (the accrual here never runs ahead of it), and
// Redis replaced the share only when the call reached it, after the plan,
// so handing it out with the next share's first token keeps the bound:
// what this instance's shares hand out stays within what they accrued
// together. A stamp that is off (a rebase between the plan and the reply
// moves the base on) only makes it smaller.
func carried(cut *reservation, at stamp) float64 {
	if cut == nil || cut.shared == nil || !(cut.pace > 0) {
		return 0
	}
	at = min(at, cut.shared.end) // nothing accrues past the share's end
	if at <= cut.start {
		return 0
	}
	q := float64(at-cut.start)*float64(cut.pace)/1000 - float64(cut.done)
	return min(max(q, 0), math.Nextafter(1, 0))
}
