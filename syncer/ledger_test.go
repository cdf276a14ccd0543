package syncer

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/lease"
)

// lt0 is an arbitrary origin for the ledger tests' times.
var lt0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func at(ms int) time.Time { return lt0.Add(time.Duration(ms) * time.Millisecond) }

// farFuture is after every expiry the tests use.
var farFuture = lt0.Add(1000 * time.Hour)

// lefts returns the tokens held at each distinct expiry, soonest first, read
// through the exported API only (so that it survives changes to the
// ledger's representation): the steps of ExpiringBefore between the
// expiries that NextExpiry and ExpiringBefore reveal.
func (l *Ledger) lefts(expiries ...time.Time) []int64 {
	var out []int64
	var prev int64
	for _, e := range expiries {
		cum := l.expiringBefore0(e.Add(time.Nanosecond))
		if cum != prev {
			out = append(out, cum-prev)
		}
		prev = cum
	}
	if prev != l.Total() {
		out = append(out, l.Total()-prev) // tokens at an expiry not listed
	}
	return out
}

// tb is what the checks need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(string, ...any)
}

// checkLedger verifies what must hold of any ledger: Total is never
// negative, it is the sum of the batches (everything expires before the
// far future), and the ledger has a next expiry exactly when it holds
// tokens.
func checkLedger(t tb, l *Ledger) {
	t.Helper()
	if l.Total() < 0 {
		t.Fatalf("Total() = %d < 0", l.Total())
	}
	if got := l.expiringBefore0(farFuture); got != l.Total() {
		t.Fatalf("Total() = %d, but the batches hold %d", l.Total(), got)
	}
	if _, ok := l.NextExpiry(0); ok != (l.Total() > 0) {
		t.Fatalf("NextExpiry(0) ok = %v with Total() = %d", ok, l.Total())
	}
}

func TestLedgerZero(t *testing.T) {
	var l Ledger
	if l.Total() != 0 {
		t.Fatalf("zero Ledger Total() = %d", l.Total())
	}
	if _, ok := l.NextExpiry(0); ok {
		t.Fatal("zero Ledger NextExpiry(0) reports a batch")
	}
	if got := l.Sync(0); got != 0 {
		t.Fatalf("Sync(0) on empty = %d", got)
	}
	if got := l.expire0(farFuture); got != 0 {
		t.Fatalf("Expire on empty = %d", got)
	}
	if got := l.expiringBefore0(farFuture); got != 0 {
		t.Fatalf("ExpiringBefore on empty = %d", got)
	}
	if got := l.clear0(); got != 0 {
		t.Fatalf("Clear on empty = %d", got)
	}
	checkLedger(t, &l)
}

// TestLedgerDrainedKeepsBatches: a ledger that spends drained keeps its
// batches, zeroed, and behaves as an empty one (no expiry, no front, a
// credit adds nothing, Sync and Expire find nothing); the next Add fills
// the same block, and trim drops the block of an empty ledger only.
func TestLedgerDrainedKeepsBatches(t *testing.T) {
	var l Ledger
	l.Add(at(100), 5, 7)
	l.Add(at(200), 3, 9)
	block := l.b
	if got := l.Sync(0); got != 8 {
		t.Fatalf("Sync(0) = %d, want 8", got)
	}
	if l.b != block || *l.b != (batches{}) {
		t.Fatalf("drained ledger's batches = %p %+v, want its block %p, zeroed", l.b, l.b, block)
	}
	if exp, ok := l.NextExpiry(0); ok {
		t.Fatalf("drained ledger NextExpiry(0) = %v, true", exp)
	}
	l.credit(4)
	if l.Total() != 0 || l.frontID() != 0 || l.n() != 0 {
		t.Fatalf("drained ledger after credit(4): Total %d, front %d, n %d; want all 0", l.Total(), l.frontID(), l.n())
	}
	if got := l.Sync(0); got != 0 {
		t.Fatalf("Sync(0) on drained = %d", got)
	}
	if got := l.expire0(farFuture); got != 0 {
		t.Fatalf("Expire on drained = %d", got)
	}
	l.Add(at(300), 2, 11)
	if l.b != block || l.Total() != 2 || l.frontID() != 11 {
		t.Fatalf("Add after drain: block %p (want %p), Total %d (want 2), front %d (want 11)", l.b, block, l.Total(), l.frontID())
	}
	l.trim()
	if l.b != block {
		t.Fatal("trim dropped the batches of a ledger that holds tokens")
	}
	l.Sync(0)
	l.trim()
	if l.b != nil {
		t.Fatal("trim kept the batches of a drained ledger")
	}
	checkLedger(t, &l)
}

func TestLedgerAddIgnoresNonPositive(t *testing.T) {
	var l Ledger
	l.Add(at(100), 0, 0)
	l.Add(at(100), -5, 0)
	if l.Total() != 0 {
		t.Fatalf("after Add(0) and Add(-5): Total %d, want 0", l.Total())
	}
	checkLedger(t, &l)
}

// TestLedgerSyncFIFO: spends come out of the oldest batch first, a batch
// spent to zero goes away, and Sync returns the tokens spent.
func TestLedgerSyncFIFO(t *testing.T) {
	var l Ledger
	e := []time.Time{at(1000), at(2000), at(3000)}
	l.Add(e[0], 10, 0)
	l.Add(e[1], 5, 0)
	l.Add(e[2], 7, 0)
	if l.Total() != 22 {
		t.Fatalf("Total() = %d, want 22", l.Total())
	}
	steps := []struct {
		level int64
		spent int64
		lefts []int64
		next  time.Time
	}{
		{22, 0, []int64{10, 5, 7}, e[0]}, // nothing spent
		{15, 7, []int64{3, 5, 7}, e[0]},  // from the oldest
		{12, 3, []int64{5, 7}, e[1]},     // oldest spent exactly: gone
		{10, 2, []int64{3, 7}, e[1]},     // next oldest
		{30, 0, []int64{3, 7}, e[1]},     // a level above Total is no spend
		{2, 8, []int64{2}, e[2]},         // across a batch boundary
		{0, 2, nil, time.Time{}},         // everything
		{0, 0, nil, time.Time{}},         // idempotent at zero
	}
	for i, s := range steps {
		if got := l.Sync(s.level); got != s.spent {
			t.Fatalf("step %d: Sync(%d) = %d, want %d", i, s.level, got, s.spent)
		}
		checkLedger(t, &l)
		if got := l.lefts(e...); !slices.Equal(got, s.lefts) {
			t.Fatalf("step %d: after Sync(%d) lefts %v, want %v", i, s.level, got, s.lefts)
		}
		if next, ok := l.NextExpiry(0); ok && !next.Equal(s.next) {
			t.Fatalf("step %d: NextExpiry(0) = +%v, want +%v", i, next.Sub(lt0), s.next.Sub(lt0))
		}
	}
}

// TestLedgerExpire: Expire returns exactly what is left of the batches whose
// expiry has come (at or before now), oldest first, and nothing else.
func TestLedgerExpire(t *testing.T) {
	var l Ledger
	l.Add(at(1000), 10, 0)
	l.Add(at(2000), 5, 0)
	l.Add(at(3000), 7, 0)
	l.Sync(18) // 4 spent from the first batch: 6, 5, 7

	if got := l.expire0(at(999)); got != 0 {
		t.Fatalf("Expire before the first expiry = %d, want 0", got)
	}
	if got := l.expire0(at(1000)); got != 6 {
		t.Fatalf("Expire at the first expiry = %d, want its 6 leftover tokens", got)
	}
	checkLedger(t, &l)
	if l.Total() != 12 {
		t.Fatalf("Total() = %d after expiring 6 of 18, want 12", l.Total())
	}
	if next, ok := l.NextExpiry(0); !ok || !next.Equal(at(2000)) {
		t.Fatalf("NextExpiry(0) = %v, %v; want %v", next, ok, at(2000))
	}
	l.Sync(9) // 3 more spent: 2, 7
	if got := l.expire0(at(5000)); got != 9 {
		t.Fatalf("Expire after every expiry = %d, want 2+7", got)
	}
	checkLedger(t, &l)
	if l.Total() != 0 {
		t.Fatalf("after expiring everything: Total %d", l.Total())
	}
}

// TestLedgerExpireSpentBatch: a batch fully spent gives nothing back when
// its time comes.
func TestLedgerExpireSpentBatch(t *testing.T) {
	var l Ledger
	l.Add(at(1000), 4, 0)
	l.Add(at(2000), 4, 0)
	l.Sync(4)
	if got := l.expire0(at(1500)); got != 0 {
		t.Fatalf("Expire of a spent batch = %d, want 0", got)
	}
	if got := l.expire0(at(2000)); got != 4 {
		t.Fatalf("Expire of the second batch = %d, want 4", got)
	}
}

func TestLedgerexpiringBefore0(t *testing.T) {
	var l Ledger
	l.Add(at(1000), 10, 0)
	l.Add(at(2000), 5, 0)
	l.Add(at(3000), 7, 0)
	cases := []struct {
		t    time.Time
		want int64
	}{
		{at(0), 0},
		{at(1000), 0}, // strictly before
		{at(1000).Add(time.Nanosecond), 10},
		{at(2000), 10},
		{at(2500), 15},
		{at(3001), 22},
	}
	for _, c := range cases {
		if got := l.expiringBefore0(c.t); got != c.want {
			t.Errorf("expiringBefore0(+%v) = %d, want %d", c.t.Sub(lt0), got, c.want)
		}
	}
	l.Sync(19) // 3 spent from the first
	if got := l.expiringBefore0(at(1001)); got != 7 {
		t.Errorf("ExpiringBefore after a spend = %d, want 7", got)
	}
	// ExpiringBefore does not change the ledger.
	checkLedger(t, &l)
	if l.Total() != 19 {
		t.Errorf("Total() = %d, want 19", l.Total())
	}
}

// TestLedgerMerge: with maxBatches batches held, adding one more merges the
// two oldest under the earlier expiry; the total is unchanged.
func TestLedgerMerge(t *testing.T) {
	var (
		l    Ledger
		exps []time.Time
		want []int64
	)
	for i := range maxBatches {
		exps = append(exps, at(1000*(i+1)))
		want = append(want, int64(i+1)) // 1, 2, ..., maxBatches tokens
		l.Add(exps[i], int64(i+1), 0)
	}
	if got := l.lefts(exps...); !slices.Equal(got, want) {
		t.Fatalf("lefts %v, want %v", got, want)
	}
	exps = append(exps, at(1000*(maxBatches+1)))
	l.Add(exps[maxBatches], 100, 0)
	checkLedger(t, &l)
	// The first two are one batch at the first expiry; the rest unchanged.
	want = append([]int64{1 + 2}, want[2:]...)
	want = append(want, 100)
	if got := l.lefts(exps...); !slices.Equal(got, want) {
		t.Fatalf("lefts after merge %v, want %v", got, want)
	}
	if next, _ := l.NextExpiry(0); !next.Equal(at(1000)) {
		t.Fatalf("merged batch expires at +%v, want the earlier +%v", next.Sub(lt0), at(1000).Sub(lt0))
	}
	total := int64(maxBatches*(maxBatches+1)/2 + 100)
	if l.Total() != total {
		t.Fatalf("Total() = %d, want %d", l.Total(), total)
	}
	// The merged tokens all go at the earlier expiry: early, never late.
	if got := l.expire0(at(1000)); got != 3 {
		t.Fatalf("Expire at the earlier expiry = %d, want both merged batches' 3", got)
	}
	total -= 3
	// Many more adds keep merging at the front, never losing tokens.
	for i := range 50 {
		l.Add(at(20000+1000*i), 1, 0)
		checkLedger(t, &l)
	}
	if l.Total() != total+50 {
		t.Fatalf("Total() = %d after 50 more adds, want %d", l.Total(), total+50)
	}
	// And spending still comes out of the oldest (merged) batch first.
	before := l.expiringBefore0(at(19999))
	l.Sync(l.Total() - 1)
	if got := l.expiringBefore0(at(19999)); got != before-1 {
		t.Fatalf("spend after merges came out of a newer batch: %d -> %d", before, got)
	}
}

func TestLedgerClear(t *testing.T) {
	var l Ledger
	l.Add(at(1000), 10, 0)
	l.Add(at(2000), 5, 0)
	l.Sync(12)
	if got := l.clear0(); got != 12 {
		t.Fatalf("Clear() = %d, want 12", got)
	}
	checkLedger(t, &l)
	if l.Total() != 0 {
		t.Fatalf("after Clear: Total %d", l.Total())
	}
	if got := l.expire0(farFuture); got != 0 {
		t.Fatalf("Expire after Clear = %d, want 0", got)
	}
	l.Add(at(3000), 2, 0)
	if l.Total() != 2 {
		t.Fatalf("Total() = %d after Clear and Add(2)", l.Total())
	}
}

// TestLedgerGrantIDs: each batch keeps the ID of its oldest grant, through
// spends, merges (the older batch's) and adds out of the order of their
// grants in Redis, and Expire and Clear report the oldest grant's.
func TestLedgerGrantIDs(t *testing.T) {
	var l Ledger
	l.Add(at(1000), 10, 11)
	l.Add(at(2000), 5, 12)
	l.Sync(l.Total() - 4) // a part of the oldest batch spent
	if n, granted, id := l.Expire(at(1500), 0); n != 6 || !granted.Equal(at(1000)) || id != 11 {
		t.Fatalf("Expire of the first batch = %d, %v, %d; want 6, +1s, 11", n, granted.Sub(lt0), id)
	}
	if n, _, id := l.Expire(at(2500), 0); n != 5 || id != 12 {
		t.Fatalf("Expire of the second batch = %d, %d; want 5, 12", n, id)
	}

	// A merge keeps the older batch's ID.
	var m Ledger
	for i := range maxBatches + 1 {
		m.Add(at(1000*(i+1)), 1, lease.GrantID(i+1))
	}
	if m.batch().id != [maxBatches]lease.GrantID{1, 3, 4} {
		t.Fatalf("IDs after a merge %v, want [1 3 4]", m.batch().id)
	}
	if n, _, id := m.Clear(); n != maxBatches+1 || id != 1 {
		t.Fatalf("Clear after a merge = %d, %d; want %d, 1", n, id, maxBatches+1)
	}

	// Batches go in the order of their grants in Redis, not of their
	// stamps: a round planned its call at +1.99s (it read its clock before
	// walking the tenants); an urgent refill for the tenant planned its own
	// at +2s, Redis ran it first and it was applied first; Redis ran the
	// round's call after it. The refill's batch stays in front, its ID with
	// it, so that a return of both names the older grant (naming the
	// round's would credit the refill's tokens against the bucket's levels
	// after a later grant: over-credit). And it takes the round's earlier
	// stamp, so that it expires no later than the round's batch does: expiry
	// stays FIFO, early rather than late.
	var o Ledger
	refill, round := redisGrant(2001), redisGrant(2050)
	o.Add(at(2000), 5, refill)
	o.Add(at(1990), 3, round)
	if o.batch().id != [maxBatches]lease.GrantID{refill, round, 0} {
		t.Fatalf("IDs %v, want [refill %d, round %d, 0]", o.batch().id, refill, round)
	}
	if next, _ := o.NextExpiry(0); !next.Equal(at(1990)) {
		t.Fatalf("the front batch expires at +%v, want the round's earlier stamp +1.99s", next.Sub(lt0))
	}
	// Spends come out of the older grant's batch; while any of it is left,
	// a return names it.
	o.Sync(5)
	if n, oldest, id := o.Clear(); n != 5 || !oldest.Equal(at(1990)) || id != refill {
		t.Fatalf("Clear = %d, %v, %d; want 5, +1.99s, the refill's %d", n, oldest.Sub(lt0), id, refill)
	}
	if _, _, id := o.Clear(); id != 0 || o.batch().id != [maxBatches]lease.GrantID{} {
		t.Fatalf("Clear of an empty ledger named grant %d (IDs %v)", id, o.batch().id)
	}
	// Once the older grant's tokens are spent, a return names the next.
	o.Add(at(2000), 5, refill)
	o.Add(at(1990), 3, round)
	o.Sync(3)
	if n, _, id := o.Expire(at(1990), 0); n != 3 || id != round {
		t.Fatalf("Expire = %d, %d; want 3, the round's %d", n, id, round)
	}
}

// redisT0 is the Redis clock of the ledger tests at lt0 (another clock than
// the local one: only differences between the two matter).
var redisT0 = lt0.Add(-37*time.Minute + 123*time.Microsecond)

// redisGrant returns the ID of a grant Redis made ms after redisT0.
func redisGrant(ms int) lease.GrantID {
	return lease.Grant{ServerTime: redisT0.Add(time.Duration(ms) * time.Millisecond)}.ID()
}

// modelBatch is a batch in the reference model of the ledger: the half-open
// range (start, end] of a running count of tokens ever added, the expiry
// it has (exp, moved earlier by merges), and the earliest expiry any of its
// tokens was added with (orig).
type modelBatch struct {
	start, end int64
	orig, exp  time.Time
	id         lease.GrantID // the ID of its oldest grant
}

// ledgerModel is an independent formulation of a FIFO ledger: every token
// ever added has a serial number, and one cursor says how many tokens from
// the front have left (spent or expired). A spend moves the cursor; an
// expiry moves it to the end of the expired batch.
type ledgerModel struct {
	live    []modelBatch // batches holding tokens, in order of Add
	added   int64        // serial of the last token added
	cursor  int64        // tokens consumed from the front
	spent   int64
	expired int64
}

func (m *ledgerModel) total() int64 { return m.added - m.cursor }

func (m *ledgerModel) left(b modelBatch) int64 { return b.end - max(b.start, m.cursor) }

// drop forgets the batches the cursor has passed.
func (m *ledgerModel) drop() {
	for len(m.live) > 0 && m.live[0].end <= m.cursor {
		m.live = m.live[1:]
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (m *ledgerModel) add(exp time.Time, n int64, id lease.GrantID) {
	if n <= 0 {
		return
	}
	if len(m.live) == maxBatches {
		// The two oldest become one, under the earlier expiry.
		a, b := m.live[0], m.live[1]
		m.live[1] = modelBatch{start: a.start, end: b.end, orig: minTime(a.orig, b.orig), exp: minTime(a.exp, b.exp), id: a.id}
		m.live = m.live[1:]
	}
	m.live = append(m.live, modelBatch{start: m.added, end: m.added + n, orig: exp, exp: exp, id: id})
	m.added += n
}

func (m *ledgerModel) spend(n int64) {
	m.cursor += n
	m.spent += n
	m.drop()
}

func (m *ledgerModel) expire(now time.Time) int64 {
	var out int64
	for len(m.live) > 0 && !now.Before(m.live[0].exp) {
		out += m.live[0].end - m.cursor
		m.cursor = m.live[0].end
		m.drop()
	}
	m.expired += out
	return out
}

// TestLedgerProperties runs random sequences of Add, spends (Sync to a lower
// level), Expire, ExpiringBefore and Clear against ledgerModel, with the
// expiries of successive Adds never decreasing (as the syncer makes them:
// its clock moves forward and a tenant's LeaseTTL is fixed). After every
// step: Total equals the model's and the sum of the batches, Total >= 0,
// Expire returned exactly the model's leftovers (tokens still held, never
// tokens spent: added = spent + expired + held), and no batch outlived
// its expiry.
func TestLedgerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ttl := time.Duration(rapid.IntRange(1, 3000).Draw(t, "ttlMs")) * time.Millisecond
		var (
			l      Ledger
			m      ledgerModel
			now    = lt0
			grants lease.GrantID // the last grant's ID: 1, 2, ...
		)
		t.Repeat(map[string]func(*rapid.T){
			"advance": func(t *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(t, "ms")) * time.Millisecond)
			},
			"add": func(t *rapid.T) {
				n := rapid.Int64Range(-2, 200).Draw(t, "n")
				grants++
				l.Add(now.Add(ttl), n, grants)
				m.add(now.Add(ttl), n, grants)
			},
			"spend": func(t *rapid.T) {
				if l.Total() == 0 {
					t.Skip("nothing to spend")
				}
				n := rapid.Int64Range(0, l.Total()).Draw(t, "n")
				if got := l.Sync(l.Total() - n); got != n {
					t.Fatalf("Sync(Total-%d) = %d", n, got)
				}
				m.spend(n)
			},
			"syncAbove": func(t *rapid.T) {
				// The counter is never above the ledger; if it is
				// reported so, nothing changes.
				before := l.Total()
				if got := l.Sync(before + rapid.Int64Range(0, 5).Draw(t, "extra")); got != 0 || l.Total() != before {
					t.Fatalf("Sync above Total = %d, Total %d -> %d", got, before, l.Total())
				}
			},
			"expire": func(t *rapid.T) {
				held := l.Total()
				var oldestID lease.GrantID
				if len(m.live) > 0 {
					oldestID = m.live[0].id
				}
				got, _, id := l.Expire(now, 0)
				want := m.expire(now)
				if got != want {
					t.Fatalf("Expire(+%v) = %d, model %d", now.Sub(lt0), got, want)
				}
				// The grant it names is the oldest of the expired tokens.
				if got > 0 && id != oldestID || got == 0 && id != 0 {
					t.Fatalf("Expire(+%v) of %d tokens named grant %d; the oldest is %d", now.Sub(lt0), got, id, oldestID)
				}
				// An expired token is one still held, never one spent.
				if got < 0 || got > held {
					t.Fatalf("Expire returned %d with %d held", got, held)
				}
				// No batch outlives its expiry: every token left was
				// added with an expiry after now.
				for _, b := range m.live {
					if !now.Before(b.orig) {
						t.Fatalf("tokens (%d, %d] added to expire at +%v are still held at +%v",
							max(b.start, m.cursor), b.end, b.orig.Sub(lt0), now.Sub(lt0))
					}
				}
				if next, ok := l.NextExpiry(0); ok && !now.Before(next) {
					t.Fatalf("a batch expiring at +%v survived Expire(+%v)", next.Sub(lt0), now.Sub(lt0))
				}
			},
			"expiringBefore": func(t *rapid.T) {
				d := time.Duration(rapid.IntRange(0, 5000).Draw(t, "ms")) * time.Millisecond
				var want int64
				for _, b := range m.live {
					if !b.exp.Before(now.Add(d)) {
						break
					}
					want += m.left(b)
				}
				if got := l.expiringBefore0(now.Add(d)); got != want {
					t.Fatalf("expiringBefore0(+%v) = %d, model %d", now.Add(d).Sub(lt0), got, want)
				}
			},
			"clear": func(t *rapid.T) {
				if rapid.IntRange(0, 9).Draw(t, "rarely") != 0 {
					t.Skip("clear is rare")
				}
				if got, want := l.clear0(), m.total(); got != want {
					t.Fatalf("Clear() = %d, model %d", got, want)
				}
				m = ledgerModel{}
			},
			"": func(t *rapid.T) {
				checkLedger(t, &l)
				if l.Total() != m.total() {
					t.Fatalf("Total() = %d, model %d", l.Total(), m.total())
				}
				// Each batch's ID is its oldest grant's, as in the model.
				for i := range maxBatches {
					want := lease.GrantID(0)
					if i < len(m.live) {
						want = m.live[i].id
					}
					if l.batch().id[i] != want {
						t.Fatalf("batch IDs %v; the model's batches %v", l.batch().id, m.live)
					}
				}
				// Same tokens at the same expiries as the model.
				live := m.live
				for _, b := range live {
					var before, upto int64
					for _, c := range live {
						if c.exp.Before(b.exp) {
							before += m.left(c)
						}
						if !c.exp.After(b.exp) {
							upto += m.left(c)
						}
					}
					if got := l.expiringBefore0(b.exp); got != before {
						t.Fatalf("%d tokens expire before +%v, model %d", got, b.exp.Sub(lt0), before)
					}
					if got := l.expiringBefore0(b.exp.Add(time.Nanosecond)); got != upto {
						t.Fatalf("%d tokens expire by +%v, model %d", got, b.exp.Sub(lt0), upto)
					}
					// Merges only ever move an expiry earlier.
					if b.exp.After(b.orig) {
						t.Fatalf("model batch expiry moved later")
					}
				}
				if next, ok := l.NextExpiry(0); ok {
					if live := m.live; !next.Equal(live[0].exp) {
						t.Fatalf("NextExpiry(0) = +%v, model +%v", next.Sub(lt0), live[0].exp.Sub(lt0))
					}
				}
				// Conservation: every token added is spent, expired or held.
				if m.added != m.spent+m.expired+m.total() {
					t.Fatalf("added %d != spent %d + expired %d + held %d", m.added, m.spent, m.expired, m.total())
				}
			},
		})
	})
}

// TestLedgerOutOfOrderAdd guards the fix of a reported bug: batches may be
// added out of order of expiry (the Syncer's Round reads its clock once,
// before it walks the tenants, so a Round that reaches a tenant after an
// urgent Refill for it has run adds a batch expiring earlier than the
// Refill's), and the ledger must still
//   - expire a batch at its expiry even when a later-expiring one was
//     added before it, and
//   - give a merged batch the earlier of the two expiries.
//
// Either failure would stretch the lease lifetime L that the window bound
// rests on (by up to the duration of a Round).
func TestLedgerOutOfOrderAdd(t *testing.T) {
	var l Ledger
	l.Add(at(2000), 5, 0) // Refill that read the clock at +1 s, TTL 1 s
	l.Add(at(1990), 7, 0) // Round that read the clock at +0.99 s, applied after
	if got := l.expire0(at(1995)); got != 7 {
		t.Errorf("Expire(+1.995s) = %d: the batch that expired at +1.99s is still held (want its 7 back)", got)
	}

	var m Ledger
	m.Add(at(2000), 1, 0)
	m.Add(at(1000), 1, 0)
	for i := range maxBatches - 1 {
		m.Add(at(3000+i), 1, 0)
	}
	if next, _ := m.NextExpiry(0); !next.Equal(at(1000)) {
		t.Errorf("merged batch expires at +%v, want the earlier of its two, +1s", next.Sub(lt0))
	}
}

// The tests below the ledger's TTL argument at 0: the times they add are
// the expiries.
func (l *Ledger) expire0(now time.Time) int64 { n, _, _ := l.Expire(now, 0); return n }

func (l *Ledger) clear0() int64 { n, _, _ := l.Clear(); return n }

func (l *Ledger) expiringBefore0(t time.Time) int64 { return l.ExpiringBefore(t, 0) }

// batch returns a copy of the ledger's batches, all zero when it holds
// none, for tests that look at its representation.
func (l *Ledger) batch() batches {
	if l.b == nil {
		return batches{}
	}
	return *l.b
}
