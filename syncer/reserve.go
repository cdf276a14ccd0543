package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// reservation is what is left of a tenant's reserved tokens: tokens Redis
// debited from its global bucket's refill ahead of time
// (lease.Grant.Reserved), which come due here one at a time at pace
// tokens per second, from start. Token k (k = 1, 2, ...; done of them
// have come due) is due at start + k/pace, and the planner moves it into
// the counter (Action.Drip) no earlier.
//
// That order keeps the bound: Redis reserved the tokens from the refill
// that begins at the grant's time (Grant.ServerTime plus
// Grant.ReservedAfter) and paced them at most at the rate, so no token is
// due before the bucket refilled it. start is the local time the reply
// arrived plus ReservedAfter, which is no earlier than the grant's time,
// and is rounded up; pace is rounded down; a plan's time is rounded down.
// Each rounding makes a token due later, never earlier.
//
// A tenant has one reservation. A second one while tokens of the first
// are still to come merges with it (add): the merged tokens come due at
// the slower of the two paces, each no earlier than it would have alone.
//
// The zero value is no reservation. 20 bytes: it is in every State.
type reservation struct {
	start stamp         // local time the first token's wait began (rounded up)
	done  int32         // tokens that came due since start
	left  int32         // tokens still to come; 0: no reservation
	pace  float32       // tokens per second (rounded down)
	id    lease.GrantID // the oldest grant whose tokens these are, for returns to name
}

// dueBy returns the tokens still to come that are due at stamp now.
func (r *reservation) dueBy(now stamp) int64 {
	if r.left <= 0 || now <= r.start {
		return 0
	}
	k := math.Floor(float64(now-r.start) * float64(r.pace) / 1000)
	return int64(min(max(k-float64(r.done), 0), float64(r.left)))
}

// take returns the tokens due at stamp now and the grant they come from,
// and counts them as come.
func (r *reservation) take(now stamp) (tokens int64, id lease.GrantID) {
	n := r.dueBy(now)
	if n == 0 {
		return 0, 0
	}
	id = r.id
	r.done += int32(n)
	r.left -= int32(n)
	if r.left == 0 {
		*r = reservation{}
	}
	return n, id
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

// add records tokens reserved at pace by grant id, whose wait begins at
// stamp start (rounded up). Merged with tokens still to come, every token
// comes due no earlier than it would have alone: the old ones at no
// faster a pace from the last one that came, the new ones after the old
// at no faster a pace, and none before start.
func (r *reservation) add(start stamp, tokens int64, pace float64, id lease.GrantID) {
	p := float32(pace)
	if float64(p) > pace {
		p = math.Nextafter32(p, 0) // round down
	}
	if tokens <= 0 || !(p > 0) {
		return
	}
	n := int32(min(tokens, math.MaxInt32))
	if r.left <= 0 {
		*r = reservation{start: start, left: n, pace: p, id: id}
		return
	}
	slow := min(r.pace, p)
	// The last token that came was due at r.at(done): the old ones go on
	// from there at the slower pace, so the j-th of them comes no earlier
	// than before. The new ones follow the old ones: the merged start is
	// also no earlier than start less the old ones' time at that pace.
	from := r.at(int64(r.done))
	oldSpan := math.Floor(float64(r.left) * 1000 / float64(slow))
	if s := float64(start) - oldSpan; s > float64(from) {
		from = stamp(s)
	}
	r.start, r.done, r.pace = from, 0, slow
	r.left = int32(min(int64(r.left)+int64(n), math.MaxInt32))
	// Returns of the merged tokens name the older grant: naming a later
	// one could credit more than Redis should.
	if r.id == 0 || id == 0 {
		r.id = 0
	}
}

// Reserved returns the tokens reserved for the tenant that are still to
// come.
func (s *State) Reserved() int64 { return int64(s.resv.left) }

// NextDue returns when the next reserved token comes due, and false when
// none is to come.
func (s *State) NextDue() (time.Time, bool) {
	at, ok := s.resv.next()
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, s.at(at)), true
}

// Reserved records the reservation of a successful lease call whose reply
// arrived at time arrived (after Granted): g.Reserved tokens come due at
// g.Pace from arrived plus g.ReservedAfter. The next lease call waits
// until they are about to run out (two intervals before the last comes
// due, and at least an interval from now), when a renewal takes over
// without a gap.
func (p *Planner) Reserved(st *State, arrived time.Time, g lease.Grant) {
	if g.Reserved <= 0 || !(g.Pace > 0) {
		return
	}
	ns := arrived.UnixNano()
	st.setClock(ns)
	st.resv.add(st.stampCeil(ns+int64(max(g.ReservedAfter, 0))), g.Reserved, g.Pace, g.ID())
	if st.resv.left <= 0 {
		return
	}
	renew := st.at(st.resv.end()) - int64(2*p.cfg.Interval)
	renew = max(renew, ns+int64(p.cfg.Interval))
	st.notBefore = max(st.notBefore, st.stampCeil(renew))
}
