package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// reservation is what is left of a tenant's reserved tokens: tokens Redis
// debited from its global bucket's refill ahead of time
// (lease.Grant.Reserved), which come due here one at a time at pace
// tokens per second, from start. Token k (k = 1, 2, ...; done of them
// have come due) is due at start + k/pace, and the planner moves it into
// the counter (Action.Drip) no earlier.
//
// That order keeps the bound: the bucket refills a reservation's tokens
// one after the other at its rate from the grant's time (Grant.ServerTime,
// Grant.Wait after Redis's clock), so token k exists from at most that
// time + k/rate; start is the local time the reply arrived plus the wait,
// which is no earlier, and pace (Redis's fair share for this instance) is
// at most the rate. Rounding makes a token due later, never earlier:
// start is rounded up, pace down, a plan's time down.
//
// A tenant has one reservation. A second one while tokens of the first
// are still to come merges with it (add) at the faster of the two paces,
// from the latest start that keeps every token due no earlier than it was
// (so, inductively, no earlier than the bucket refilled it): the new
// tokens follow the old ones, late by at most the old ones' time left,
// and a slow share does not hold later tokens back.
//
// A reserved token comes due after its grant, by up to the wait and the
// length of its reservation: a return of it must say so. granted keeps
// when the oldest call whose tokens are still to come was planned (before
// Redis ran it), and the State keeps how far before its tokens came due
// the grants of the tokens it holds were made (State.dripLag), which a
// return's age adds (Action.ExpiredGranted, Drained).
//
// A State holds one while tokens are to come (State.resv), and none
// otherwise.
//
// A reservation's tokens still to come are dropped once the quota's rate
// in force falls below the rate they were reserved under (under; see
// State.dropFallen), as a rate share ends then: a change applies within a
// poll and two rounds, and the bound after a change counts no reserved
// tokens (TestReservationStopsWhenTheRateFalls).
//
// A rate share's accrual (share.go) is one too: tokens of the bucket's
// refill that Redis gives this instance at the share's rate instead of
// the bucket, none of them earlier than the share accrued it. shared is
// then the share as Redis reported it (nil for a reservation).
type reservation struct {
	start   stamp      // local time the first token's wait began (rounded up)
	granted stamp      // when the oldest call whose tokens are to come was planned
	done    int32      // tokens that came due since start
	left    int32      // tokens still to come; 0: no reservation
	pace    float32    // tokens per second (rounded down)
	under   float32    // the quota's rate when reserved (rounded down; the highest of a merge); 0 for a share
	shared  *heldShare // the rate share these tokens accrue from; nil for a reservation
}

// dueBy returns the tokens still to come that are due at stamp now.
func (r *reservation) dueBy(now stamp) int64 {
	if r.left <= 0 || now <= r.start {
		return 0
	}
	k := math.Floor(float64(now-r.start) * float64(r.pace) / 1000)
	return int64(min(max(k-float64(r.done), 0), float64(r.left)))
}

// take returns the tokens due at stamp now and when the oldest call
// whose tokens they are was planned, and counts them as come. (They join
// the ledger unnamed: see Planner.plan.)
func (r *reservation) take(now stamp) (tokens int64, granted stamp) {
	n := r.dueBy(now)
	if n == 0 {
		return 0, 0
	}
	granted = r.granted
	r.done += int32(n)
	r.left -= int32(n)
	if r.left == 0 && r.shared == nil {
		*r = reservation{}
	}
	if r.left == 0 && r.shared != nil {
		r.more()
	}
	return n, granted
}

// more counts the tokens of a rate share's window that its int32 count
// left out, once those counted have come due: the tokens due by the
// share's end (heldShare.end), from start at pace, less those that came.
// A share's window may hold more tokens than an int32 counts (a share of
// 1e9 a second over 8 s: 7.99e9), and cut to 2^31-1 its accrual stopped
// there, 2.1 s into the window, the rest of the share (withheld from the
// bucket by Redis) coming due nowhere (TestHugeShareComesDueWhole). No
// more tokens come than the share's window held: Planner.SharedAfter
// counted them over the same window, its start rounded up and its end
// down, so for a share that fitted there is none. So that done fits too,
// start moves on by m ms (m = done/pace, rounded down) and done goes down
// by the tokens due in them (rounded down): each token comes due no
// earlier than before, at most one token later (once per 2^31 tokens).
func (r *reservation) more() {
	if !(r.pace > 0) {
		return
	}
	pace := float64(r.pace)
	if math.Floor(float64(r.shared.end-r.start)*pace/1000)-float64(r.done) < 1 {
		return
	}
	m := math.Floor(float64(r.done) * 1000 / pace)
	r.start = stamp(min(float64(r.start)+m, float64(stampMax)))
	r.done -= int32(min(math.Floor(m*pace/1000), float64(r.done)))
	if left := math.Floor(float64(r.shared.end-r.start)*pace/1000) - float64(r.done); left >= 1 {
		r.left = int32(min(left, float64(math.MaxInt32-r.done)))
	}
}

// dropFallen drops st's reservation (not a rate share's accrual, which
// shareOp ends) when rate, the quota's rate in force, is below the rate
// its tokens were reserved under, and reports whether it did. Why: the
// tokens still to come are Redis's refill at the old rate, and coming due
// at the old pace after an operator lowered the rate, a reservation of
// the second ahead went on for up to its length (a minute at most): 990
// tokens in the 5 s after a rate of 1,000 went to 10, where the bound
// after a change allows 260 (TestReservationStopsWhenTheRateFalls).
// Dropped, they go unspent, as on eviction (Drained): Redis committed
// them, and a release of tokens not produced yet would credit them early.
func (st *State) dropFallen(rate float64) bool {
	if r := st.resv; r != nil && r.shared == nil && rate < float64(r.under) {
		st.resv = nil
		return true
	}
	return false
}

// takeDue is take on st's reservation, which goes once none of its tokens
// is left to come.
func (st *State) takeDue(now stamp) (tokens int64, granted stamp) {
	if st.resv == nil {
		return 0, 0
	}
	tokens, granted = st.resv.take(now)
	// A rate share stays known until its end once its last whole token
	// came due: Redis holds it still, and renewAt counts back from its end
	// (heldShare.end). Dropped, the planner asked for a share at once,
	// which replaced the share early, in its epoch's first half.
	if r := st.resv; r.left <= 0 && (r.shared == nil || now >= r.shared.end) {
		st.resv = nil
	}
	return tokens, granted
}

// at returns the stamp (rounded up) at which k tokens after start are
// due.
func (r *reservation) at(k int64) stamp {
	ms := math.Ceil(float64(k) * 1000 / float64(r.pace))
	return stamp(min(float64(r.start)+ms, float64(stampMax)))
}

// next returns when the next token comes due, and false when none is to
// come.
func (r *reservation) next() (stamp, bool) {
	if r.left <= 0 {
		return 0, false
	}
	return r.at(int64(r.done) + 1), true
}

// end returns when the last token comes due (r must hold tokens).
func (r *reservation) end() stamp { return r.at(int64(r.done) + int64(r.left)) }

// down32 returns x as a float32 no larger than x.
func down32(x float64) float32 {
	f := float32(x)
	if float64(f) > x {
		f = math.Nextafter32(f, 0)
	}
	return f
}

// add records tokens reserved at pace from a bucket refilling
// at rate (the pace is capped at the rate), on a call planned at stamp
// planned, whose wait begins at stamp start (rounded up). Merged with
// tokens still to come, every token comes due no earlier than it did (or
// would have) alone: see reservation.
func (r *reservation) add(planned, start stamp, tokens int64, pace, rate float64) {
	p := down32(min(pace, rate))
	if tokens <= 0 || !(p > 0) {
		return
	}
	n := int32(min(tokens, math.MaxInt32))
	under := down32(rate)
	if r.left <= 0 {
		*r = reservation{start: start, granted: planned, left: n, pace: p, under: under}
		return
	}
	// The merged tokens come at the faster pace, from the latest start
	// that keeps each one due no earlier than before: old token j (after
	// the done ones) was due at start + (done + j)/pace, new token i at
	// start' + i/p; at the faster pace both differences grow with j and i,
	// so the last of each decides. (Keeping the slower pace instead would
	// let a slow share hold every later token back.)
	merged := max(r.pace, p)
	old := float64(r.left)
	oldEnd := float64(r.start) + (float64(r.done)+old)*1000/float64(r.pace)
	newEnd := float64(start) + float64(n)*1000/float64(p)
	from := max(float64(r.at(int64(r.done))),
		oldEnd-old*1000/float64(merged),
		newEnd-(old+float64(n))*1000/float64(merged))
	r.start = stamp(min(math.Ceil(from), float64(stampMax)))
	r.done, r.pace = 0, merged
	r.granted = min(r.granted, planned)
	r.under = max(r.under, under)
	r.left = int32(min(int64(r.left)+int64(n), math.MaxInt32))
}

// Reserved returns the tokens reserved for the tenant that are still to
// come.
func (s *State) Reserved() int64 {
	if s.resv == nil {
		return 0
	}
	return int64(s.resv.left)
}

// NextDue returns when the next reserved token comes due, and false when
// none is to come.
func (s *State) NextDue() (time.Time, bool) {
	if s.resv == nil {
		return time.Time{}, false
	}
	at, ok := s.resv.next()
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, s.at(at)), true
}

// Reserved records the reservation of a successful lease call planned at
// time now whose reply arrived at time arrived (after Granted), lim being
// the quota in force (the one the call applied): g.Reserved
// tokens come due at g.Pace from arrived plus g.Wait. The next lease call waits
// until they are about to run out (two intervals before the last comes
// due, and at least an interval from now), when a renewal takes over
// without a gap.
func (p *Planner) Reserved(st *State, lim quota.Quota, now, arrived time.Time, g lease.Grant) {
	ns := arrived.UnixNano()
	if g.Reserved <= 0 || !(g.Pace > 0) {
		if p.cfg.Reserve > 0 && st.flags&flagScarce != 0 && g.Share > 0 && lim.Rate > 0 && g.Wait > 0 {
			// No room: the bucket's refill is committed to others'
			// reservations up to ReserveAhead past Redis's clock (Wait
			// > 0 says it is frozen). Room for half of this instance's
			// share over the length (or of the second ahead) comes as
			// the refill catches up: ask again then, not on every tick.
			// (A share above the rate, from a registry summary older
			// than a jump in demand, reserves at most the rate.)
			span := time.Duration(min(g.Share, lim.Rate) * p.cfg.Reserve.Seconds() / lim.Rate * 1e9)
			retry := max(g.Wait+min(span, lease.ReserveAhead)/2-lease.ReserveAhead, p.cfg.Interval)
			// At most a day, as every hold (holdBack): a bucket's time
			// runs further ahead of the clock only when Redis's clock
			// went back (a failover to a replica behind), and held to
			// its stamps' range (24.8 days) the tenant stayed held
			// whatever that clock did meanwhile
			// (TestNoRoomRetryWithinADay).
			retry = min(retry, 24*time.Hour)
			// The others that found no room wait too: each comes back at
			// its own turn among them, not all at once.
			others := int64(max(g.Instances-1, 0))
			retry += time.Duration(p.jitter(st, ns, min(others*int64(span), int64(p.cfg.Reserve))))
			st.setClock(ns)
			st.notBefore = max(st.notBefore, st.stampCeil(ns+int64(retry)))
		}
		return
	}
	st.setClock(ns)
	// Tokens reserved under a higher rate than the reply brought (an
	// override lowered it) go before the merge, which would carry them on
	// under the lower rate.
	st.dropFallen(lim.Rate)
	if st.resv == nil {
		st.resv = new(reservation)
	}
	st.resv.add(st.stampOf(now.UnixNano()), st.stampCeil(ns+int64(max(g.Wait, 0))), g.Reserved, g.Pace, lim.Rate)
	if st.resv.left <= 0 {
		st.resv = nil
		return
	}
	// The next reservation's tokens will also wait behind what the
	// bucket's refill is committed to, about as long as these did: ask
	// that much before these run out, so that they follow on.
	renew := st.at(st.resv.end()) - int64(max(g.Wait, 0)) - int64(2*p.cfg.Interval)
	renew = max(renew, ns+int64(p.cfg.Interval))
	st.notBefore = max(st.notBefore, st.stampCeil(renew), p.reserveSpacing(st, ns, g.Pace, lim.Rate))
}

// reserveLength returns the reservation length of a lease call planned at
// ns (local time, nanoseconds) that reports demand (tokens a second,
// Request.Demand): Config.Reserve, but for the first
// reservation of a run of them (none of its tokens still to come), which
// is between half of it and all of it, by the jitter. The instances of a
// tenant that start together (a fleet restarted, a tenant's traffic
// arriving everywhere at once) would otherwise renew together for as long
// as they keep reserving: all of them at the same moment, sharing the
// second of refill ahead that reservations may take (lease.ReserveAhead),
// most of them finding little or none of it.
func (p *Planner) reserveLength(st *State, ns int64, demand float64) time.Duration {
	length := p.cfg.Reserve
	if st.resv == nil {
		half := p.cfg.Reserve / 2
		length -= time.Duration(p.jitter(st, ns, int64(half)))
	}
	// At most what the reported demand makes half an int32 of tokens in,
	// in whole milliseconds (Redis rounds the length up to one): the
	// tokens to come are counted in an int32 (reservation.left, room for
	// a merge of two), and Redis debits all it reserves, so what did not
	// fit was lost. Redis reserves at this instance's share, which is at
	// most the demand the call reports and at most the rate in force in
	// Redis (lease.MaxRate at most). Not the rate known here: an override
	// the call brings back (SetQuota raised the rate while it was on its
	// way) is not known yet, and a call planned under a rate of a million
	// a second reserved 15,084,522,647 tokens under a rate of 1e12, of
	// which 2^31-1 came due (TestReservationUnderARaisedOverrideComesDueWhole;
	// at a rate of 1e10, TestHugeReservationComesDueWhole).
	if d := min(demand, lease.MaxRate); d > 0 {
		most := time.Duration(math.Floor(float64(math.MaxInt32/2)*1000/d)) * time.Millisecond
		length = min(length, most)
	}
	return length
}

// reserveSpacing returns the earliest stamp of the next lease call after
// one at ns (local time, nanoseconds) that reserved at pace (this
// instance's fair share) from a bucket refilling at rate. The refill
// that reservations may take is shared: every instance
// reserving on the tenant takes from the same second ahead of Redis's
// clock (lease.ReserveAhead), which refills at the rate. This
// instance's fair part of it accrues at its pace, so a reservation the
// size it wants, pace times the length (or, capped, the whole second
// ahead), accrues in T = min(length, ReserveAhead * rate/pace). Calling
// sooner than half of T gets what others left, a few tokens at a time:
// with 16 instances reserving 4 s each, calls renewing as their small
// reservations ran out made 5.5 calls per instance per second, against
// 1.2 without reservations (TestReservationsCutFleetCalls). An instance
// alone on the tenant (pace = rate) waits half a second at most, less
// than its reservation lasts. The jitter (up to a quarter of T) keeps
// the instances of a tenant from coming back together. A call that found
// no room is not spaced so (its retry above is): it has no tokens
// coming, and a request waiting on it (a WaitN through an outage) would
// wait T/2 more (TestSimulation's seed 36).
func (p *Planner) reserveSpacing(st *State, ns int64, pace, rate float64) stamp {
	if !(pace > 0) || !(rate > 0) {
		return 0
	}
	t := min(p.cfg.Reserve.Seconds(), lease.ReserveAhead.Seconds()*rate/min(pace, rate))
	half := int64(t / 2 * 1e9)
	return st.stampCeil(ns + half + p.jitter(st, ns, half/2))
}
