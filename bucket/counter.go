package bucket

import (
	"math/bits"
	"sync/atomic"
)

// Counter is a lock-free count of leased tokens.
//
// Requests call TrySpend concurrently; the syncer calls Add, Take and Drain
// at the same time. Every token is in exactly one place at every moment
// that a method of the Counter is not running, so the count can never go
// negative and the sum of tokens spent can never exceed the sum of tokens
// added minus those taken back. The zero value is an empty counter, ready
// to use. A Counter must not be copied after first use.
//
// A Counter spent from many goroutines at once on several CPUs can be
// split into slots, one per P (Stripe): a spend then takes from the slot
// of the P it runs on, so that the cache line of a hot tenant's count does
// not move from CPU to CPU on every request. Unsplit (the zero value), its
// tokens are one int64, spent with one compare-and-swap.
type Counter struct {
	// n holds the tokens not in a slot: all of them while the counter is
	// not split. Requests spend from it, the syncer adds to it.
	n atomic.Int64
	// slots is nil, or the per-P slots set by Stripe: only Spread and
	// Stripe (the syncer) put tokens into a slot; requests only take from
	// them.
	slots atomic.Pointer[[]slot]
}

// slot is one P's part of a split Counter, padded to 128 bytes, two
// cache lines: the allocator aligns the arrays of 2, 4 and 8 slots (its
// 256-, 512- and 1,024-byte size classes) on their size, so each slot has
// an aligned pair of lines of its own. Why a pair, not one line: x86
// processors may fetch a line's neighbour in its aligned 128-byte block
// along with it (adjacent-line prefetch), and two slots of 64 bytes side
// by side behaved as if they shared a line. On the 2-core AMD EPYC host,
// BenchmarkAllowParallel (two goroutines over the same 1,024 hot
// tenants, each spending from its own P's slot) took 29.6-64.7 ns a
// decision with 64-byte slots and 15.2-19.0 ns with 128-byte ones, one
// goroutine 14.9-16.3 ns (test binaries of both, run in turn, 2026-12-07;
// docs/performance.md, "Slots a line pair apart").
type slot struct {
	n atomic.Int64
	// stolen is what spends on other Ps took from the slot since the
	// syncer last looked (fold): a spend takes from another P's slot only
	// when its own and the shared count fell short, so it is added to
	// there, off the path of a spend from its own slot.
	stolen atomic.Int64
	// left and home are the syncer's (its calls never run concurrently:
	// see Stripe): the tokens the slot held when it last looked, and the
	// tokens that spends on the slot's own P took from it since Homes last
	// reported them.
	left, home int64
	// back, in the first slot alone, holds what failed spends put back
	// (trySpendSplit): counted (Load), taken back first (Take, Drain),
	// and spendable again only once the syncer moves it to the shared
	// count (Restore), after its take-back. Why: a spend of n > 1 holds
	// the tokens it gathers in no count, so a Take or Drain meanwhile
	// missed them, and put back into the shared count they were spendable
	// again though their batch had expired (until the next plan forfeited
	// them) or their tenant been drained (left in it, uncounted):
	// TestPutBackAfterEmptied.
	back atomic.Int64
	_    [88]byte // to 128 bytes: see slot
}

// maxSlots is the most slots Stripe makes, whatever GOMAXPROCS is.
const maxSlots = 64

// TrySpend spends n tokens if the counter holds at least n. It returns
// whether it spent them and the tokens left afterwards (or, when it did not,
// the tokens held). n must be positive; TrySpend(0) reports true without
// changing anything and a negative n is refused.
//
// It spends from the shared count when that holds n, as an unsplit
// counter always does: one compare-and-swap. A split counter keeps its
// shared count near zero (Spread), so a spend then takes from the slot of
// the current P, then from the other slots, and the tokens it reports are
// those of its slot and the shared count: a lower bound of the counter's
// total. A spend of n > 1 whose n tokens are in several places fails at
// once, moving nothing, when the counter holds fewer than n spendable
// tokens (what failed spends put back is not: see slot.back); otherwise
// it takes them place by place (a concurrent Load may miss those it holds
// meanwhile), and, if other spends took some of them first, puts them
// back where no request spends them until the syncer restores them
// (Restore; see slot.back). A spend that fails while Stripe moves the
// tokens looks again where they went (spendAgain), and a spend that
// finds the counter joined after its shared count fell short looks at
// the shared count again: the join gathered the slots into it.
func (c *Counter) TrySpend(n int64) (ok bool, left int64) {
	if ok, left = c.TrySpendShared(n); !ok && n > 0 {
		// TrySpendSlots, written out: a call less on a split counter.
		if s := c.slots.Load(); s != nil {
			if ok, left = c.trySpendSplit(s, procIndex(), n); !ok {
				return c.spendAgain(s, n, left)
			}
			return ok, left
		}
		return c.TrySpendShared(n)
	}
	return ok, left
}

// TrySpendShared is TrySpend from the shared count alone: all of an
// unsplit counter, nearly nothing of a split one. It is small enough to
// be inlined into the request path, which goes on to TrySpend when it
// fails.
func (c *Counter) TrySpendShared(n int64) (ok bool, left int64) {
	if n < 0 {
		return false, c.n.Load()
	}
	return trySpend(&c.n, n)
}

// TrySpendSlots is TrySpend for a caller whose TrySpendShared(n) fell
// short a moment ago: a split counter's slots at once, without the shared
// count again; an unsplit counter's shared count once more. Why: the
// request path tries the shared count inlined, then this out of line, and
// a split counter keeps its shared count near empty, so a second look
// there was a load and a call spent on every decision of a split tenant.
func (c *Counter) TrySpendSlots(n int64) (ok bool, left int64) {
	if s := c.slots.Load(); s != nil && n > 0 {
		if ok, left = c.trySpendSplit(s, procIndex(), n); !ok {
			return c.spendAgain(s, n, left)
		}
		return ok, left
	}
	return c.TrySpendShared(n)
}

// trySpend spends n tokens from v if it holds at least n.
func trySpend(v *atomic.Int64, n int64) (ok bool, left int64) {
	for {
		cur := v.Load()
		if cur < n {
			return false, cur
		}
		if v.CompareAndSwap(cur, cur-n) {
			return true, cur - n
		}
	}
}

// take removes up to max tokens from v and returns how many it removed and
// the count left.
func take(v *atomic.Int64, max int64) (taken, left int64) {
	for {
		cur := v.Load()
		t := min(cur, max)
		if t <= 0 {
			return 0, cur
		}
		if v.CompareAndSwap(cur, cur-t) {
			return t, cur - t
		}
	}
}

// spendAgain is TrySpend after a spend of n from the slots sp of a
// split counter failed, leaving left: it looks again where a restripe
// moves tokens meanwhile
// (TestRestripeNeverEmpties: spends of one refused while the counter
// held 2^40 tokens, 938 to 7,251 times in 20,000 joins and splits):
//
//   - the shared count, once more: Stripe gathers the slots into it one
//     by one, as it joins or replaces them, and a spend that looked
//     there before a slot's tokens came and at that slot after they left
//     saw neither;
//   - the counter's new slots, if Stripe replaced sp meanwhile: the
//     syncer spreads a restriped counter's tokens into them, and a spend
//     still looking at the old ones, emptied by the restripe, found the
//     shared count emptied by the spread too.
//
// It tries the slots again only after a restripe, so it never spins.
func (c *Counter) spendAgain(sp *[]slot, n, left int64) (bool, int64) {
	for {
		cur := c.slots.Load()
		if cur == sp {
			if ok, l := c.TrySpendShared(n); ok {
				return true, l // a lower bound, as trySpendSplit's
			}
			return false, left
		}
		if cur == nil { // joined: every token is in the shared count
			return c.TrySpendShared(n)
		}
		sp = cur
		var ok bool
		if ok, left = c.trySpendSplit(sp, procIndex(), n); ok {
			return ok, left
		}
	}
}

// trySpendSplit is TrySpend on P p of a counter split into s, whose
// shared count held fewer than n tokens a moment ago.
func (c *Counter) trySpendSplit(sp *[]slot, p int, n int64) (ok bool, left int64) {
	s := *sp
	home := &s[p&(len(s)-1)].n
	if ok, left = trySpend(home, n); ok {
		return true, left + c.n.Load()
	}
	// Short in the home slot: the other slots, once each, and the shared
	// count again (a lease may have come meanwhile).
	if ok, left = trySpend(&c.n, n); ok {
		return true, left + home.Load()
	}
	var got int64
	if n > 1 {
		// Gather n from several places only if the counter holds n: the
		// tokens gathered are out of every count until they are spent or
		// put back, and a Load meanwhile (the syncer's plan) would read
		// them as spent, and the next plan, finding them back, would
		// forfeit them as tokens it no longer knows. A lease spent to
		// below n, the common way to fail, then fails here with nothing
		// moved (TestFailedSplitSpendMovesNothing); only a spend that
		// loses a race with others after this look still gathers and
		// puts back. What failed spends put back (slot.back) is held but
		// not spendable: counted towards n, a spend of more than the
		// spendable tokens gathered them all and put them back there,
		// where no request could spend them until the syncer restored
		// them (TestFailedSplitSpendIgnoresPutBack).
		var held int64
		for i := range s {
			held += s[i].n.Load()
		}
		if held += c.n.Load(); held < n {
			return false, held + s[0].back.Load()
		}
		// What the home slot and the shared count hold goes towards n.
		got, _ = take(home, n)
		t, _ := take(&c.n, n-got)
		got += t
	}
	for i := range s {
		if got == n {
			break
		}
		if w := &s[i].n; w != home {
			t, _ := take(w, n-got)
			if t > 0 {
				s[i].stolen.Add(t)
			}
			got += t
		}
	}
	if got == n {
		return true, home.Load() + c.n.Load()
	}
	if got > 0 {
		s[0].back.Add(got) // see slot.back
		c.carry(sp)
	}
	return false, c.Load()
}

// Add adds n >= 0 tokens (a new lease) to the shared count and returns the
// counter's total. A negative n is ignored: tokens leave the counter only
// through TrySpend, Take and Drain.
func (c *Counter) Add(n int64) int64 {
	if n <= 0 {
		return c.Load()
	}
	v := c.n.Add(n)
	if s := c.slots.Load(); s != nil {
		v += sumSlots(*s)
	}
	return v
}

// Take removes up to max tokens (expired lease tokens going back to Redis),
// from what failed spends put back first (slot.back), then the shared
// count, then the slots, and returns how many it removed and the count
// left.
func (c *Counter) Take(max int64) (taken, left int64) {
	if max <= 0 {
		return 0, c.Load()
	}
	s := c.slots.Load()
	if s != nil {
		// What failed spends put back first: requests cannot spend it.
		taken, left = take(&(*s)[0].back, max)
	}
	t, l := take(&c.n, max-taken)
	taken, left = taken+t, left+l
	if s != nil {
		fold(*s)
		for i := range *s {
			t, l := take(&(*s)[i].n, max-taken)
			(*s)[i].left -= t
			taken += t
			left += l
		}
	}
	return taken, left
}

// Drain removes every token and returns how many there were.
func (c *Counter) Drain() int64 {
	n := c.n.Swap(0)
	if s := c.slots.Load(); s != nil {
		n += (*s)[0].back.Swap(0)
		fold(*s)
		for i := range *s {
			v := (*s)[i].n.Swap(0)
			(*s)[i].left -= v
			n += v
		}
	}
	return n
}

// Load returns the tokens held now. On a split counter it reads the slots,
// then the shared count.
func (c *Counter) Load() int64 {
	var n int64
	if s := c.slots.Load(); s != nil {
		n = sumSlots(*s)
	}
	return n + c.n.Load()
}

// Restore moves what failed spends put back (slot.back) to the shared
// count, where requests spend it: the syncer calls it at the start of a
// plan, once it has taken from it what its ledger no longer holds (the
// excess: Take takes from it first), so that a put-back of tokens an
// expiry missed is forfeited rather than spent. Calls of Restore follow
// the rules of Stripe's.
func (c *Counter) Restore() {
	if s := c.slots.Load(); s != nil {
		move(&(*s)[0].back, &c.n)
	}
}

// carry moves what failed spends put back into the slots sp, if Stripe
// replaced them, where it is counted. Stripe carries the old slots'
// put-backs once they are replaced, so a put-back before that is carried
// by Stripe, one after it by this (the Swap makes it one or the other):
// into the new slots', and, should those be replaced too meanwhile, or
// the counter joined, into the shared count, where it is spendable
// before the next plan's take-back (the one way left: a failed gather
// that a restripe overtook; Stripe joins no counter whose put-backs
// wait, but cannot see one under way without waiting for it, which it
// does not). At most two moves: no spin.
func (c *Counter) carry(sp *[]slot) {
	from := sp
	for try := 0; ; try++ {
		cur := c.slots.Load()
		if cur == from {
			return // in place
		}
		to := &c.n
		if cur != nil && try == 0 {
			to = &(*cur)[0].back
		}
		if move(&(*from)[0].back, to) == 0 || to == &c.n {
			return // Stripe carried it, or it is in the shared count
		}
		from = cur
	}
}

// Back returns what failed spends put back into a split counter and the
// syncer has not restored yet (slot.back): counted, not spendable. The
// syncer plans a tenant that holds some rather than leave it quiet.
func (c *Counter) Back() int64 {
	if s := c.slots.Load(); s != nil {
		return (*s)[0].back.Load()
	}
	return 0
}

// sumSlots returns the tokens in the slots s, what failed spends put
// back (slot.back) included.
func sumSlots(s []slot) (n int64) {
	for i := range s {
		n += s[i].n.Load()
	}
	return n + s[0].back.Load()
}

// Slots returns the number of slots the counter is split into, 0 when it
// is one count.
func (c *Counter) Slots() int {
	if s := c.slots.Load(); s != nil {
		return len(*s)
	}
	return 0
}

// Stripe splits the counter into procs slots (rounded up to a power of
// two, at most maxSlots), or, for procs <= 1, joins it back into one
// count. The tokens in the slots move to the shared count; Spread hands
// them out. Calls of Stripe, Spread, Take, Drain and Homes must not run
// concurrently with each other (the syncer makes them, under the
// tenant's lock); TrySpend and Add may run at any time.
func (c *Counter) Stripe(procs int) {
	procs = min(procs, maxSlots)
	old := c.slots.Load()
	if procs <= 1 {
		if old != nil {
			if (*old)[0].back.Load() != 0 {
				// What failed spends put back has nowhere to wait in one
				// count: joined, it would be spendable before the plan's
				// take-back. The counter stays split until restored.
				return
			}
			// Gathered first: a spend that finds no slots finds their
			// tokens in the shared count. And again once replaced: a
			// spend that loaded them may still have taken from them,
			// and put back since (see trySpendSplit).
			c.gather(*old)
			c.slots.Store(nil)
			c.gather(*old)
			move(&(*old)[0].back, &c.n)
		}
		return
	}
	procs = 1 << bits.Len(uint(procs-1)) // a power of two, for a mask
	if old != nil && len(*old) == procs {
		return
	}
	s := make([]slot, procs)
	if old != nil {
		// Gathered first, as for a join: a spend that finds the new,
		// empty slots finds the old ones' tokens in the shared count,
		// where it looks next. (Gathered only once they were replaced, a
		// spend of one in between found every place it looked empty
		// while the old slots held the tokens: TestRestripeNeverEmpties.)
		c.gather(*old)
	}
	c.slots.Store(&s)
	if old != nil {
		c.gather(*old)
		// What failed spends put back waits in the new slots, carried
		// once they are in place (see trySpendSplit).
		move(&(*old)[0].back, &s[0].back)
	}
}

// gather moves what the slots s hold to the shared count. A spend that
// loaded s before it was replaced may still take from them meanwhile; no
// one adds to them any more.
func (c *Counter) gather(s []slot) {
	for i := range s {
		move(&s[i].n, &c.n)
	}
}

// move moves every token of from to to, and returns how many: a Swap,
// so that of two moves of one count, one gets them and the other none.
func move(from, to *atomic.Int64) int64 {
	v := from.Swap(0)
	if v > 0 {
		to.Add(v)
	}
	return v
}

// Spread moves the tokens of a split counter's shared count into its
// slots, and from slots above an even part of the total to those below
// it, so that each P spends from its own slot and the shared count stays
// near zero: what is left there is the remainder of the division, fewer
// tokens than slots. It does nothing on a counter that is not split.
//
// A move is a take from one place and an add to another: at most one is
// in flight at a time, and never one of every token the counter holds,
// so that a spend of one token never finds the counter empty while it
// holds one.
func (c *Counter) Spread() {
	sp := c.slots.Load()
	if sp == nil {
		return
	}
	s := *sp
	target := c.Load() / int64(len(s))
	if target == 0 {
		return
	}
	fold(s)
	for i := range s {
		if have := s[i].n.Load(); have > target {
			if moved, _ := take(&s[i].n, have-target); moved > 0 {
				s[i].left -= moved
				c.n.Add(moved)
			}
		}
	}
	for i := range s {
		if have := s[i].n.Load(); have < target {
			if moved, _ := take(&c.n, target-have); moved > 0 {
				s[i].left += moved
				s[i].n.Add(moved)
			}
		}
	}
}

// fold adds to each slot's home what spends on its own P took from it
// since the syncer last looked: what it held then (left), less what it
// holds now and what other Ps took (stolen). The syncer then moves tokens
// in or out of the slot and changes left by as much. A spend between
// the two reads of a slot may be counted to the wrong P, or not at all: a
// token or two, in counts of hundreds.
func fold(s []slot) {
	for i := range s {
		have := s[i].n.Load()
		used := s[i].left - have - s[i].stolen.Swap(0)
		s[i].home += max(used, 0)
		s[i].left = have
	}
}

// Homes reports from how many Ps a split counter's tokens were spent
// since it last reported: once its slots' own Ps have taken at least
// sample tokens from them (ok), homes is the fewest slots, largest first,
// whose own Ps took seven eighths of those or more, and the count starts
// over; before that, ok is false and the count goes on. So homes is 1
// when one P took seven eighths of the spends, and more when others took
// more than an eighth between them, however thinly spread: 14 for spends
// spread evenly over 16 Ps. A counter spent from one goroutine at a time
// shows one home (a goroutine stays on its P while it runs), one spent
// from goroutines on several CPUs more. Zero and false on a counter that
// is not split. Calls of Homes follow the rules of Stripe's.
//
// Why: a split counter pays for its slots on every spend (which P the
// spend runs on, one more cache line), and gains only when spends on
// other Ps would otherwise move the shared count's cache line between
// CPUs; the syncer joins a counter that one P spends from. (Counting the
// slots that each took an eighth, as Homes did, found none on a machine
// of more than 8 Ps whose spends were spread evenly, and the syncer
// joined the counters of its most spread tenants.)
func (c *Counter) Homes(sample int64) (homes int, ok bool) {
	sp := c.slots.Load()
	if sp == nil {
		return 0, false
	}
	s := *sp
	fold(s)
	var total int64
	for i := range s {
		total += s[i].home
	}
	if total < max(sample, 1) {
		return 0, false
	}
	// Take the largest slot left until seven eighths are covered: a slot
	// taken is marked -1 (spends are never negative). Most counters stop
	// at the first or second slot; at worst this is quadratic in the
	// slots, once per sample of spends of a hot tenant.
	for covered := int64(0); 8*covered < 7*total; homes++ {
		top := -1
		for i := range s {
			if s[i].home >= 0 && (top < 0 || s[i].home > s[top].home) {
				top = i
			}
		}
		covered += s[top].home
		s[top].home = -1
	}
	for i := range s {
		s[i].home = 0
	}
	return homes, true
}
