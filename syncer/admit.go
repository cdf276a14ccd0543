package syncer

import (
	"math"
	"slices"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// admit gives a round's planned calls (cands, each tenant locked) room in
// the call budgets of their nodes at now, and returns those that got it
// (jobs) and those that did not (refused, for the round to skip: planned
// again a quarter interval on, or nearer their turn: turnWait). A quota
// re-read always goes.
//
// When a node's window holds fewer calls than the round plans for it, the
// calls that go are taken in the order of their tenants' turns (turn)
// from where the node's last short round stopped (redisNode.admitFrom),
// so that over the rounds every tenant gets its turn; but asks for a rate
// share (lease.ShareAsk) go first, up to half of the node's room, in the
// round's order.
//
// Why: in the order of the registry, the round gave room to the same
// tenants first every time. With Redis saturated (the queue model of
// TestSaturatedRedisSharesItsCapacityEvenly, at 1.6 times what its thread
// runs), the tenants early in that order were admitted their whole rate
// and 661 of 1,500 less than half of the mean, many nothing at all
// (Jain's index 0.61 over the tenants). Why a place to start from for
// each node: with one for all, set by the first call refused on any
// node, a Cluster master with few tenants followed the turns of one with
// many, and gave its few places to the same tenants round after round
// (TestAdmitGivesTurnsOnEachNode: 4 tenants of a master with 1 place
// admitted 16, 34, 140 and 110 times in 300 rounds). Why asks for a
// share first: a pair whose share is granted calls about once a period
// after it (rate shares, docs/design.md), where one refilling leases of
// tokens calls several times a second, so under a cut window each ask
// let through frees room in the rounds after. In turn with the refills,
// the asks of a fleet of 32 x 2,000 went through a few hundred to a few
// thousand a second while Redis stayed saturated; first, BenchmarkFleet
// 32x2000 with rate shares, -fleet.coldasync and -fleet.rotate admitted
// 0.46-0.63 of the bound at 0.12x-0.17x of redis_rate's Redis CPU, where
// it admitted 0.46-0.59 at 0.19x-0.23x (docs/performance.md, "Asks for a
// rate share first"). Why half: first without a cap, the
// shape whose load reaches its tenants one after the other (without
// -fleet.coldasync) left its worst tenant at 0.03 of its bound where it
// had 0.06-0.14, the refills of the tenants reached last waiting behind
// the asks; half keeps the turns going at half the room or more. What it
// costs: at 16 x 1,000 on a slower host, about a fifth more Redis CPU
// (0.134x-0.192x in 20 runs against 0.114x-0.138x before it), the new
// asks put first being refused while a fleet's first shares, sized
// before every instance registered, hold the whole rate
// (docs/performance.md, "Asks first at 16 × 1,000").
func (s *Syncer) admit(now time.Time, cands []job) (jobs, refused []job) {
	if len(cands) == 0 {
		return nil, nil
	}
	// The room each node has for the round's calls, taken at once: what
	// a node's window cannot hold is refused, whoever asks.
	type room struct {
		name        string // the node's name (job.node)
		node        *redisNode
		want, grant int
		granted     int    // grant as taken (walk counts grant down)
		first       uint64 // the key of the node's first call refused
		refused     int32  // the calls walk refused so far (job.ahead)
		asks        int    // the places left for asks for a rate share ahead of the turns
	}
	var rooms []room // one entry a node, usually one
	at := func(name string) *room {
		for i := range rooms {
			if rooms[i].name == name {
				return &rooms[i]
			}
		}
		rooms = append(rooms, room{name: name, node: s.node(name), first: math.MaxUint64})
		return &rooms[len(rooms)-1]
	}
	for _, j := range cands {
		r := at(j.node)
		if j.read {
			r.node.budget.take(1, true, now)
			continue
		}
		r.want++
	}
	short := false
	for i := range rooms {
		r := &rooms[i]
		r.grant = r.node.budget.take(r.want, false, now)
		r.granted = r.grant
		short = short || r.grant < r.want
	}
	if !short {
		return cands, nil
	}
	// In the order of turn from the node's admitFrom (wrapping), ties in
	// the round's order: each key is the turn's distance from admitFrom
	// above the candidate's index. Turns are spread evenly, so the keys
	// under a threshold sized for about twice the room are sorted first
	// (a round under a cut window plans thousands of calls for tens of
	// places: sorting them all, every round of every instance, took a
	// tenth of the CPU of BenchmarkFleet at 32 x 2,000), and the rest only
	// when the room goes further.
	granted := 0
	for i := range rooms {
		granted += rooms[i].granted
		rooms[i].asks = rooms[i].granted / 2
	}
	limit := uint64(math.MaxUint32)
	if n := uint64(len(cands)); 2*uint64(granted)+16 < n {
		limit = (2*uint64(granted) + 16) * limit / n
	}
	early, late := s.admitKeys[:0], s.admitLate[:0]
	jobs, refused = s.admitted[:0], s.refused[:0]
	defer func() {
		s.admitKeys, s.admitLate = early[:0], late[:0]
		s.admitted, s.refused = jobs[:0], refused[:0] // cleared by round
	}()
	for i, j := range cands {
		if j.read {
			jobs = append(jobs, j) // its room is taken
			continue
		}
		r := at(j.node)
		d := uint64(s.turn(j.t) - r.node.admitFrom)
		if j.share == lease.ShareAsk && r.asks > 0 {
			// Ahead of every turn, up to half of the node's room.
			r.asks--
			d = 0
		}
		k := d<<32 | uint64(i)
		if k>>32 < limit {
			early = append(early, k)
		} else {
			late = append(late, k)
		}
	}
	slices.Sort(early)
	walk := func(keys []uint64) {
		for _, k := range keys {
			j := cands[uint32(k)]
			if r := at(j.node); r.grant > 0 {
				r.grant--
				jobs = append(jobs, j)
			} else {
				r.first = min(r.first, k)
				j.ahead = r.refused
				r.refused++
				refused = append(refused, j)
			}
		}
	}
	walk(early)
	left := 0
	for _, r := range rooms {
		left += r.grant
	}
	if left > 0 {
		// Room left on some node: the rest go in order.
		slices.Sort(late)
		walk(late)
	} else {
		// Every place taken under the threshold: the rest are refused,
		// unsorted (turnWait estimates how many are ahead of each).
		for _, k := range late {
			j := cands[uint32(k)]
			r := at(j.node)
			r.first = min(r.first, k)
			j.ahead = -1
			refused = append(refused, j)
		}
	}
	for _, r := range rooms {
		if r.first == math.MaxUint64 {
			continue // not short: its turns stay where they were
		}
		// The node's next short round starts at its first call refused.
		r.node.admitFrom = s.turn(cands[uint32(r.first)].t)
		r.node.admitGranted, r.node.admitWanted = r.granted, r.want
	}
	return jobs, refused
}

// turnWait is how long t, whose call to node the last short round
// refused with ahead of the node's calls refused before it in the order
// of turns (job.ahead), may wait before it is planned again and still be
// a candidate when its turn comes: a third of the rounds those calls take
// at the room that round gave (admitGranted), in whole ticks, and at most
// its lease TTL. With ahead unknown (-1: refused past every place, not
// put in order), the calls ahead are estimated from t's turn's distance
// from the node's admitFrom, as that share of the calls the round had
// (admitWanted). Zero when no short round admitted anything: the next
// tick, as before.
//
// Why: under a cut window a round plans thousands of calls for tens of
// places, and planned them all again at the next tick, to refuse nearly
// all of them again: at 32 x 2,000 the rounds took two fifths of
// BenchmarkFleet's CPU, beside the Redis they share the cores with. A
// third, not all, of the estimate: the room a round gives may grow; a
// tenant planned again at a third of its distance, then a third of the
// rest, is a candidate well before its turn unless the room more than
// triples. Why the count where it is known: turns are spread at random,
// so a distance says how many calls are ahead only on average. For the
// calls next in turn it said several rounds where none was ahead, and
// when all of them waited, rounds admitted nobody
// (TestTurnWaitKeepsTurns, 2,000 tenants and one place: two rounds in a
// row empty).
func (s *Syncer) turnWait(t *Tenant, node *redisNode, ahead int32) time.Duration {
	if node.admitGranted <= 0 {
		return 0
	}
	calls := float64(ahead)
	if ahead < 0 {
		calls = float64(s.turn(t)-node.admitFrom) / (1 << 32) * float64(node.admitWanted)
	}
	tick := s.planner.Config().Interval / 4
	ticks := math.Floor(calls / float64(node.admitGranted) / 3)
	return min(time.Duration(ticks)*tick, t.Limits().LeaseTTL)
}

// turn is t's place in the order in which short rounds give room: its
// name's hash mixed with the planner's seed, so that each instance has an
// order of its own. In one order for all, the instances of a fleet called
// for the same tenants at once, round after round: the first calls took
// the bucket's tokens and the others came back empty, then no one called
// while it refilled and overflowed (BenchmarkFleet at 32 x 2,000 made a
// third of the calls, and admitted less, than with the orders apart).
func (s *Syncer) turn(t *Tenant) uint32 {
	return uint32(mix(uint64(t.st().hash) ^ s.planner.seed))
}
