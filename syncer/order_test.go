package syncer

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/lease"
)

// The tests in this file hold the ledger to naming, for a return, a grant
// no later in Redis than the oldest grant whose tokens are returned: Redis
// credits a return only against the bucket's levels after the grant it
// names (lease.ReleaseRequest.Grant), so naming a later grant credits
// tokens that the cap would have taken.

// TestLedgerReturnAfterOvertakingRefill is the reported case, with B = 100
// and r = 1000/s (a token per ms). A round reads its clock (local +0) and
// walks its tenants; meanwhile an urgent refill for one of them plans its
// call at +1ms and takes 40 tokens from the full bucket (Redis time g1).
// The bucket refills to 100 at g1+40ms, and another instance takes 95 at
// g1+50ms. Then the round's call takes the 6 tokens left (g2 = g1+51ms),
// and at g1+52ms the 46 tokens go back. Had the refill's 40 never been
// granted, the bucket would have lost them to the cap when it refilled, so
// the exact credit is that of the round's 6 alone. A return naming g2
// counts only the levels after g2 and is credited all 46.
func TestLedgerReturnAfterOvertakingRefill(t *testing.T) {
	const burst = 100
	g1 := int64(5_000_000_123) // Redis µs; its low 32 bits are not those of the local clock
	gOther, g2, rel := g1+50_000, g1+51_000, g1+52_000
	var h peaks.Unmerged // the bucket's level history: each call's level before its debit
	h.Reset(g1-time.Hour.Microseconds(), burst)
	h.Push(g1, 100)     // the refill: 100 -> 60
	h.Push(gOther, 100) // refilled to 100; the other instance: -> 5
	h.Push(g2, 6)       // the round: 6 -> 0
	const levelAtRelease = 1.0
	credit := func(h peaks.Unmerged, amount int64, granted int64) float64 {
		return max(min(float64(amount), burst-h.Peak(granted, levelAtRelease)), 0)
	}
	// Each batch on its own (the refill's credit, 0, raises nothing; the
	// round's raises no entry, none being after g2).
	exact := credit(h, 40, g1) + credit(h, 6, g2)
	if exact != 6 {
		t.Fatalf("test premise: exact credit %v, want 6", exact)
	}

	id := func(us int64) lease.GrantID { return lease.Grant{ServerTime: time.UnixMicro(us)}.ID() }
	roundAt, refillAt := at(0), at(1) // local clock, when each call was planned
	const margin = 50 * time.Millisecond
	for _, how := range []string{"Clear", "Expire"} {
		var l Ledger
		l.Add(refillAt, 40, id(g1)) // applied first
		l.Add(roundAt, 6, id(g2))
		now := at(52) // local clock at the return
		var (
			n      int64
			oldest time.Time
			named  lease.GrantID
		)
		if how == "Clear" {
			n, oldest, named = l.Clear()
		} else {
			n, oldest, named = l.Expire(now, 0)
		}
		if n != 46 {
			t.Fatalf("%s returned %d tokens, want 46", how, n)
		}
		// The release the syncer makes of them (Syncer.returnOf), as
		// release.lua reads it.
		age := now.Sub(oldest) + margin
		g := peaks.GrantTime(rel, rel, (age.Microseconds()+999)/1000*1000, uint32(named))
		if got := credit(h, n, g); got > exact {
			t.Errorf("%s named grant %d (g1 %d, g2 %d): a release of its %d tokens is credited %v, more than the exact %v",
				how, named, id(g1), id(g2), n, got, exact)
		}
	}
}

// TestLedgerUnknownGrantNamesNone: a return that includes tokens of a
// grant whose ID is unknown names none (Redis then judges it by its age),
// since a known ID might be later than the unknown grant; and a merge with
// such a batch forgets the known ID.
func TestLedgerUnknownGrantNamesNone(t *testing.T) {
	var l Ledger
	l.Add(at(1000), 5, redisGrant(1001))
	l.Add(at(1500), 5, 0)
	if n, _, id := l.Clear(); n != 10 || id != 0 {
		t.Fatalf("Clear of a known and an unknown grant's tokens = %d, %d; want 10, 0", n, id)
	}
	l.Add(at(1000), 5, redisGrant(1001))
	l.Add(at(1500), 5, 0)
	if n, _, id := l.Expire(at(1000), 0); n != 5 || id != redisGrant(1001) {
		t.Fatalf("Expire of the known grant's batch alone = %d, %d; want 5, %d", n, id, redisGrant(1001))
	}
	var m Ledger
	m.Add(at(1000), 1, 0)
	for i := range maxBatches {
		m.Add(at(2000+1000*i), 1, redisGrant(2001+1000*i))
	}
	if m.batch().id[0] != 0 {
		t.Fatalf("a batch merged from an unknown and a known grant names %d, want 0 (IDs %v)", m.batch().id[0], m.batch().id)
	}
}

// TestLedgerGrantOrderAcrossWraps: grant IDs are the low 32 bits of Redis
// time in µs and wrap every 71.6 minutes, and a lease may live longer
// (LeaseTTL is not bounded by that): the ledger still orders grants by
// their Redis time, and merges keep the older.
func TestLedgerGrantOrderAcrossWraps(t *testing.T) {
	for _, apart := range []time.Duration{
		time.Millisecond,
		35 * time.Minute,
		36 * time.Minute, // more than 2^31 µs: the IDs' difference changes sign
		71*time.Minute + 35*time.Second,
		72 * time.Minute, // more than 2^32 µs: the IDs' difference wraps
		150 * time.Minute,
	} {
		ms := int(apart / time.Millisecond)
		older, later := redisGrant(10), redisGrant(10+ms)
		// Applied in either order; the later grant planned 30 ms before
		// the older (a slow round overtaken by a refill).
		for _, order := range []string{"older first", "later first"} {
			var l Ledger
			if order == "older first" {
				l.Add(at(0), 1, older)
				l.Add(at(ms-30), 2, later)
			} else {
				l.Add(at(ms-30), 2, later)
				l.Add(at(0), 1, older)
			}
			if l.batch().id != [maxBatches]lease.GrantID{older, later, 0} {
				t.Errorf("grants %v apart, %s: IDs %v, want [%d %d 0]", apart, order, l.batch().id, older, later)
			}
		}
		// A merge keeps the older, whichever batch is in front.
		var m Ledger
		m.Add(at(0), 1, older)
		m.Add(at(ms-30), 1, later)
		m.Add(at(ms), 1, redisGrant(10+ms+1))
		m.Add(at(ms+1), 1, redisGrant(10+ms+2))
		if m.batch().id[0] != older {
			t.Errorf("grants %v apart: the merged batch names %d, want the older %d", apart, m.batch().id[0], older)
		}
	}
}

// orderGrant is a grant in TestLedgerOrderProperties: when its call was
// planned (local clock, µs), when Redis ran it (Redis clock, µs), and its
// tokens.
type orderGrant struct {
	planned, redis int64
	tokens         int64
}

// TestLedgerOrderProperties adds grants to a ledger in random order, as
// the syncer may apply them (a round reads its clock before it walks its
// tenants, and a refill planned later can reach Redis first), with random
// spends, expiries and returns, over Redis times whose 32-bit IDs wrap.
// Each grant is planned before Redis runs it, by at most maxDelay, and
// applied after. The model holds the tokens per grant and attributes
// spends and returns to the oldest grant in Redis first, which leaves the
// youngest tokens held: the attribution most favourable to a return. It
// checks at every return that the release the syncer would make of it
// (Syncer.returnOf, read as release.lua reads it: the named grant, or the
// age when none is named or the age is beyond 2^32 µs) is judged from a
// time no later than the oldest grant the model still holds tokens of;
// and after every Expire, that the ledger holds no more than was granted
// by calls planned within the TTL (no batch outlives its lifetime).
func TestLedgerOrderProperties(t *testing.T) {
	const (
		maxDelay = int64(2 * time.Second / time.Microsecond) // planning to Redis, at most
		margin   = int64(100 * time.Millisecond / time.Microsecond)
	)
	rapid.Check(t, func(t *rapid.T) {
		ttl := time.Duration(rapid.Int64Range(1, 150*60*1000).Draw(t, "ttlMs")) * time.Millisecond
		// Redis time minus local time, µs; the local clock starts at lt0.
		offset := rapid.Int64Range(-1<<40, 1<<40).Draw(t, "offset")
		local0 := lt0.UnixMicro()
		var (
			l       Ledger
			now     = local0 // local clock, µs
			pending []orderGrant
			added   []orderGrant // by Redis time
			held    []int64      // the model's tokens of added[i]
			lastG   = now + offset - maxDelay
		)
		localTime := func(us int64) time.Time { return time.UnixMicro(us) }
		id := func(g orderGrant) lease.GrantID { return lease.Grant{ServerTime: time.UnixMicro(g.redis)}.ID() }
		// take removes n tokens from the model, oldest grant first, and
		// returns the oldest grant it took from.
		take := func(n int64) (oldest orderGrant) {
			first := true
			for i := range added {
				if n == 0 {
					break
				}
				if held[i] == 0 {
					continue
				}
				if first {
					oldest, first = added[i], false
				}
				k := min(n, held[i])
				held[i] -= k
				n -= k
			}
			if n != 0 {
				t.Fatalf("the ledger gave back %d tokens more than it held", n)
			}
			return oldest
		}
		total := func() (s int64) {
			for _, h := range held {
				s += h
			}
			return s
		}
		checkReturn := func(what string, n int64, oldest time.Time, named lease.GrantID) {
			if n == 0 {
				if named != 0 {
					t.Fatalf("%s of nothing named grant %d", what, named)
				}
				return
			}
			y := take(n)
			if named == 0 {
				t.Fatalf("%s named no grant, though every grant has an ID", what)
			}
			ageUS := now - oldest.UnixMicro() + margin
			ageUS = (ageUS + 999) / 1000 * 1000       // the release sends whole ms, rounded up
			for _, late := range []int64{0, margin} { // the release reaches Redis within its margin
				r := now + offset + late
				if g := peaks.GrantTime(r, r, ageUS, uint32(named)); g > y.redis {
					t.Fatalf("%s of %d tokens named grant %d, read by Redis at %d as granted at %d: after the oldest grant held, %d (ID %d, planned +%dµs)",
						what, n, named, r, g, y.redis, id(y), y.planned-local0)
				}
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"plan": func(t *rapid.T) {
				// A call planned now or a little before, run by Redis after
				// the previous one.
				planned := now - rapid.Int64Range(0, maxDelay/2).Draw(t, "before")
				g := max(lastG+1, planned+offset+rapid.Int64Range(0, maxDelay/2).Draw(t, "delay"))
				if uint32(g) == 0 {
					g++ // an ID of zero means none
				}
				lastG = g
				pending = append(pending, orderGrant{planned: planned, redis: g, tokens: rapid.Int64Range(1, 100).Draw(t, "tokens")})
			},
			"apply": func(t *rapid.T) {
				if len(pending) == 0 {
					return // nothing in flight: a no-op step
				}
				i := rapid.IntRange(0, len(pending)-1).Draw(t, "which")
				g := pending[i]
				pending = slices.Delete(pending, i, i+1)
				now = max(now, g.redis-offset) // the reply comes after Redis ran the call
				l.Add(localTime(g.planned), g.tokens, id(g))
				j, _ := slices.BinarySearchFunc(added, g.redis, func(a orderGrant, r int64) int { return int(a.redis - r) })
				added = slices.Insert(added, j, g)
				held = slices.Insert(held, j, g.tokens)
			},
			"advance": func(t *rapid.T) {
				if rapid.IntRange(0, 9).Draw(t, "far") == 0 {
					now += rapid.Int64Range(0, int64(80*time.Minute/time.Microsecond)).Draw(t, "us")
				} else {
					now += rapid.Int64Range(0, int64(3*time.Second/time.Microsecond)).Draw(t, "us")
				}
			},
			"spend": func(t *rapid.T) {
				n := rapid.Int64Range(0, l.Total()).Draw(t, "n")
				if got := l.Sync(l.Total() - n); got != n {
					t.Fatalf("Sync(Total-%d) = %d", n, got)
				}
				take(n)
			},
			"expire": func(t *rapid.T) {
				n, oldest, named := l.Expire(localTime(now), ttl)
				checkReturn("Expire", n, oldest, named)
				var live int64 // granted by calls planned within the TTL
				for _, g := range added {
					if g.planned+ttl.Microseconds() > now {
						live += g.tokens
					}
				}
				if l.Total() > live {
					t.Fatalf("after Expire the ledger holds %d tokens; calls planned within the TTL (%v) granted %d", l.Total(), ttl, live)
				}
			},
			"clear": func(t *rapid.T) {
				if rapid.IntRange(0, 4).Draw(t, "rarely") != 0 {
					return // clear is rare: most draws are no-op steps
				}
				n, oldest, named := l.Clear()
				checkReturn("Clear", n, oldest, named)
			},
			"": func(t *rapid.T) {
				if l.Total() != total() {
					t.Fatalf("ledger Total %d, model %d", l.Total(), total())
				}
				// Expiry is FIFO: stamps never decrease along the list.
				for i := 1; i < maxBatches && l.batch().left[i] > 0; i++ {
					if l.batch().stamp[i] < l.batch().stamp[i-1] {
						t.Fatalf("stamps %v decrease", l.batch().stamp)
					}
				}
			},
		})
	})
}
