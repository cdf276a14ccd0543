package syncer

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/bucket"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// Tenant is one tenant's lease on this instance: its name, the tokens
// requests spend, the quota in force and the syncer's bookkeeping. The
// syncer creates it (Syncer.Track) and is the only writer of its fields;
// requests go through its methods: Spend on success, NoteMiss on a miss.
// The syncer holds mu while it plans and calls Redis for the tenant.
//
// There is one per tenant, so it is small: 96 bytes (a size class it
// fills; TestRecordSizes), what every tracked tenant needs. The rest of its lease,
// the planner's State and what the last lease call said, is a leaseState
// of its own (128 bytes), which a tenant drops when it goes dormant: idle
// long enough that the planner's estimates carry nothing (see
// Planner.Dormant), holding no token, reserved or leased, with no call
// held back or failing. A dormant tenant is revived, its State made anew
// as for a tenant that leased before, when a request or a refund needs it
// planned. Allocated apart as well, while needed: the ledger's batches
// while tokens are leased (48 bytes), a reservation while reserved tokens
// or a rate share's are to come (32, and 32 for the share), the fallback bucket once Redis has failed. Its name
// is the one copy the registry has: its table holds the Tenant (see
// table).
type Tenant struct {
	// tokens are the leased tokens requests spend from: one count, or with
	// Options.PerCPUDemand, while the tenant is hot and spent from more
	// than one P, a count and a slot per P (Syncer.spread).
	tokens bucket.Counter
	// counted, less tokens, is the count of requests admitted from tokens
	// without a wait (Spend; see Admitted), so that Spend(1), the hot
	// path, is one compare-and-swap and nothing more. It is the tokens
	// the syncer put in (leases, drips, refunds credited) less those it
	// took out (expiries, forfeits, drains), less the tokens requests
	// took beyond one per admission counted: a Spend of n > 1 takes n-1
	// from it, SpendWaited n, uncount 1, and UnspendWaited gives n back.
	// What changes both does so between beginSync and endSync, so that
	// Admitted reads the two as one.
	counted atomic.Int64
	// name is the tenant's name: its key in Redis and in the registry.
	name string

	// limits is the quota in force: the tenant's base limits, or those of
	// the override Redis reported on the last lease call (which point back
	// to the base). Swapped by the syncer, read by requests.
	limits atomic.Pointer[limits]

	// flags: flagUrgent and flagRefunded (requests, syncer), the rest by
	// the syncer; above them, the seqlock of tokens and counted (see
	// syncBusy).
	flags atomic.Uint32
	// front is the ID of the oldest grant in the ledger (zero when it is
	// empty or the ID unknown), published by the syncer after each change
	// of the ledger. A request reads it before it spends: the tokens it
	// spends come from that grant or a later one (see Refund).
	front atomic.Uint32

	// miss is what requests that missed recorded since the last plan,
	// written by them (NoteMiss and NoteNeed, with flagUrgent; Unmiss), taken and
	// reset by the syncer (take): the tokens they were denied, less those
	// of requests admitted after their miss (Unmiss), in its low 32 bits
	// as an int32, saturating (a demand beyond 2^31-1 tokens between two
	// plans, a quarter of the refresh interval apart, counts as that
	// much), and the largest n denied in its high 32, as a float32
	// rounded up (as State.needMax keeps it: a lease covers that much,
	// exact up to 2^24).
	miss atomic.Uint64

	// lease is the rest of the tenant's lease, nil while the tenant is
	// dormant. The syncer swaps it, holding mu; requests read what the
	// syncer publishes in it.
	lease atomic.Pointer[leaseState]

	// quietUntil is the unix nanoseconds before which a round may pass
	// the tenant by without its lock, 0 when it may not (quiet.go): its
	// next call is held back until then, and a plan would only observe its
	// misses; or a plan would only observe that nothing was spent nor
	// asked for; for a dormant tenant, when its idle check is due (sleep,
	// passBy). Its low bits (quietLevels) say which: in the second and
	// third, the level whose leaving ends it early (stillAt). Published by
	// the syncer after each plan and when the tenant goes dormant, holding
	// mu; cleared by UnspendWaited, whose tokens the next plan must take,
	// by a quota change (requota), and by revive.
	quietUntil atomic.Int64

	mu sync.Mutex // guards lease's State, the swap of lease, and idleSince; held across a lease call for this tenant
	// idleSince is when the tenant was last active (unix nanoseconds):
	// for a dormant tenant, its State's lastActive when it went dormant;
	// while lease is set, its State's as the last plan left it
	// (keepActive), read only once that stamp is clamped (see
	// lastActive).
	idleSince int64
}

// leaseState is the part of a Tenant that a dormant tenant drops (see
// Tenant): what the last lease calls said, which requests read, and the
// planner's State.
type leaseState struct {
	// Written by the syncer, read by requests.
	// retryAt is when the tenant's requests may next find tokens without
	// a lease call of their own (unix nanoseconds): when a lease call may
	// next be made, or a reserved token comes due, whichever is first
	// (Syncer.setRetry, its only writer).
	retryAt atomic.Int64
	// emptyAt is when the global bucket, as the last lease call saw it (or
	// a return of this instance's tokens since, when that saw more:
	// sawReturn) and refilling at the tenant's rate, was empty (unix
	// nanoseconds): it holds (now - emptyAt) * rate tokens now. One number
	// instead of a level and a time. Zero when no lease call reported it
	// since the State was made: a revived tenant's bucket was full when it
	// went dormant.
	emptyAt atomic.Int64
	// level is the global bucket's level, in whole tokens, as the last
	// successful lease call reported it (after its grant): see Level.
	level atomic.Int64

	// fallback is the local bucket of the fallback mode, made on the first
	// failure and retuned by the syncer while failures go on.
	fallback atomic.Pointer[fallback]

	st State // guarded by the Tenant's mu
}

// seenLevel returns the tokens the global bucket holds at now as the last
// lease call saw it (emptyAt), refilled at rate since and not capped at
// the burst, and false when no lease call reported it since the State was
// made (emptyAt zero: a revived tenant's bucket was full when it went
// dormant).
func (ls *leaseState) seenLevel(now time.Time, rate float64) (float64, bool) {
	at := ls.emptyAt.Load()
	if at == 0 {
		return 0, false
	}
	// The level Redis reported is a floor: emptyAt cannot tell a level
	// that took more than an int64 of nanoseconds to make (durationCeil
	// saturates: 0.92 tokens at a rate of 1e-10), and the bucket held
	// that level when the reply came.
	floor := float64(ls.level.Load())
	if d := now.UnixNano() - at; d >= 0 || at >= 0 {
		return max(float64(d)/1e9*rate, floor), true
	}
	// The difference overflowed: the bucket was empty centuries ago by a
	// rate so slow (a token in 10^9 s and more) that its level needed
	// longer than an int64 of nanoseconds to make (durationCeil
	// saturates). Wrapped, it read as a deep debt: a RetryAfter of 292
	// years beside the tokens the bucket held, and a tenant that never
	// went dormant (refilled).
	return max((float64(now.UnixNano())-float64(at))/1e9*rate, floor), true
}

// sawReturn raises the level seen (emptyAt) to tokens, the level a
// release of this instance's tokens reported, anchored at its reply's
// arrival (as a lease call's is): a return only adds to the bucket, so a
// level below the one seen is older news (a lease call that Redis ran
// after the return answered first) and is ignored. Unseen, a return left
// the level where the last lease call had found it: a WaitN whose ctx
// cut it off after a partial grant that emptied the bucket (40 of 60,
// Rate 1, Burst 100) saw its 40 tokens expire and go back, and the next
// WaitN(60) slept until 60 s, the denial before it saying RetryAfter 50 s,
// though the bucket held 60 at 20 s (TestWaitCountsReturnedTokens in the
// root package). Nothing is raised while no lease call has reported the
// level since the State was made (emptyAt zero: seenLevel).
func (ls *leaseState) sawReturn(arrived time.Time, tokens, rate float64) {
	at := arrived.UnixNano() - int64(durationCeil(tokens/rate))
	for {
		cur := ls.emptyAt.Load()
		if cur == 0 || at >= cur || ls.emptyAt.CompareAndSwap(cur, at) {
			return
		}
	}
}

// refilled reports whether the global bucket, as the last lease call saw
// it (or a return since: sawReturn) and refilling at lim's rate, holds lim's burst by now: full, unless
// other instances took from it since. True when no lease call reported
// it since the State was made (seenLevel).
func (ls *leaseState) refilled(now time.Time, lim *quota.Quota) bool {
	level, ok := ls.seenLevel(now, lim.Rate)
	return !ok || level >= float64(lim.Burst)
}

// Tenant.flags.
const (
	flagUrgent  uint32 = 1 << iota // a request ran short since the last plan
	flagFailing                    // the last lease call failed
	flagLeased                     // a lease call has succeeded at least once
	flagEvicted                    // removed from the syncer's tenants; never leased again
	// flagRefunded: a refund of the tenant's tokens went to the syncer's
	// pending returns (Refund) since the last round planned it. Set by
	// requests, after the return is queued; taken by rounds, and by a
	// refill that made the queued returns itself (see Input.Refunded).
	flagRefunded
	// flagSolo: the tenant's split counter was last found spent from one
	// P alone, and is not split again before its probe (Syncer.spread).
	// The syncer's, under the tenant's lock.
	flagSolo
	// flagIdle: the syncer keeps no lease for the tenant: its last plan
	// sized its lease at nothing (too little demand, Planner.target, or
	// requests too far apart for a lease to last, Planner.sparse). A
	// request that misses then waits for a lease as a first request does
	// (Cold). Not set when the last tokens expired unspent while the plan
	// still sizes a lease: a busy tenant whose calls are held back (its
	// bucket dry) strands tokens its requests cannot spend, and its misses
	// are its quota spent (TestHotTenantLapseDeniedAtOnce in the root
	// package). Set
	// and cleared by planWith, which leaves it set while its acquire is
	// out (setIdle); cleared too when an acquire answers or tokens land
	// (a grant, a drip), except for a grant of all that a plan keeping
	// no lease asked for (a request's own tokens: apply). The syncer's,
	// under the tenant's lock.
	flagIdle
	// flagReread: a round that found the quota version moved
	// (Input.QuotaCheck) found the tenant locked, by a lease call that
	// Redis may have run before the change: its next plan re-reads the
	// quota (Input.QuotaSeen). Set by that round, taken by planWith.
	flagReread
	// flagDrained: the counter is being drained for good (an eviction,
	// Close's ReleaseAll: drainLocked), and nothing may put tokens into
	// it again. Set by the syncer, under the tenant's lock, before the
	// drain; never cleared. The rule it keeps, in one place
	// (beginLive): what requests may put into the counter without the
	// lock (a give-back, UnspendAt; a failed spend of n > 1 that puts
	// back what it gathered, spendCounting) is put inside a bracket
	// (beginSync) whose start refuses once the mark is set, and the
	// drain waits, once it has set the mark, for the brackets under
	// way (quiesce). A bracket either started before the mark, and
	// the drain takes what it put, or after it, and put nothing. Why:
	// put after the drain, the tokens were neither returned nor
	// forfeited, and a request that still held the evicted tenant
	// spent them, an admission LeaseTotals never counted
	// (TestGiveBackDuringDrain, TestSplitSpendDuringDrain).
	flagDrained
)

// Above the flags, Tenant.flags holds a seqlock of the changes of tokens
// and counted that must look as one (see Admitted): the number of changes
// under way (11 bits, from syncBusy: at most 2,047 at once) and of changes
// made (the top 12, from syncDone, wrapping).
const (
	syncBusy uint32 = 1 << 9
	syncDone uint32 = 1 << 20
	syncMask uint32 = syncDone - syncBusy // the changes under way

	_ int = int(syncBusy) - 2*int(flagDrained) // the flags fit under syncBusy
)

// beginSync and endSync bracket a change of both tokens and counted
// (credit, debit, drain, spendCounting, UnspendWaited): Admitted, reading
// the two, retries while one is under way or if one ran meanwhile. A
// Spend(1) changes tokens alone: one atomic operation, no bracket. And
// uncount, which changes counted alone, is bracketed so that its look at
// flagEvicted and its change count as one (see uncount).
func (t *Tenant) beginSync() { t.flags.Add(syncBusy) }
func (t *Tenant) endSync()   { t.flags.Add(syncDone - syncBusy) }

// beginLive is beginSync for a request that may put tokens into the
// counter without t's lock, and reports whether it may: not once a
// drain marked t (flagDrained), when it must put nothing. The bracket
// is begun either way; the caller ends it (endSync). The look at the
// mark is the bracket's start (one atomic add, whose result it reads),
// so that quiesce, which sets the mark and then waits for the brackets
// under way, either waits for this one or this one sees the mark.
func (t *Tenant) beginLive() bool { return t.flags.Add(syncBusy)&flagDrained == 0 }

// quiesce marks t drained for good (flagDrained) and waits until no
// change of tokens and counted is under way: once it returns, no
// request puts tokens into t's counter again (beginLive), so a drain
// after it leaves nothing behind. t.mu must be held. The wait is for
// brackets of a few atomic operations (those begun after the mark end
// at once), as Admitted's is.
func (t *Tenant) quiesce() {
	t.setFlag(flagDrained, true)
	for t.flags.Load()&syncMask != 0 {
		runtime.Gosched()
	}
}

// credit puts n > 0 tokens into the counter for requests to spend (a
// lease, a drip of reserved tokens, a refund credited to the lease) and
// returns the tokens held.
func (t *Tenant) credit(n int64) (level int64) {
	if n <= 0 {
		return t.tokens.Load()
	}
	t.beginSync()
	level = t.tokens.Add(n)
	t.counted.Add(n)
	t.endSync()
	return level
}

// debit takes up to max tokens out of the counter (expired or forfeited)
// and returns how many it took and the tokens left.
func (t *Tenant) debit(max int64) (taken, left int64) {
	t.beginSync()
	taken, left = t.tokens.Take(max)
	t.counted.Add(-taken)
	t.endSync()
	return taken, left
}

// drain takes every token out of the counter and returns how many there
// were.
func (t *Tenant) drain() int64 {
	t.beginSync()
	n := t.tokens.Drain()
	t.counted.Add(-n)
	t.endSync()
	return n
}

// restore makes what failed spends put back spendable again
// (bucket.Counter.Restore): at the start of a plan, once its excess
// forfeit has taken from them what the ledger no longer holds
// (Syncer.planWith). t's lock is held. The move is one change of tokens for Admitted.
func (t *Tenant) restore() {
	t.beginSync()
	t.tokens.Restore()
	t.endSync()
}

// restripe splits t's counter into n slots and tops them up from the
// shared count (bucket.Counter.Stripe, Spread), or for n <= 1 joins a
// split counter back into one count. t's lock is held. The moves are one
// change of tokens for Admitted.
func (t *Tenant) restripe(n int) {
	if n <= 1 && t.tokens.Slots() == 0 {
		return
	}
	t.beginSync()
	t.tokens.Stripe(n)
	t.tokens.Spread()
	t.endSync()
}

// Admitted returns the requests admitted from the tenant's lease without
// a wait (Spend, less Syncer.Uncount): exact, as of a moment during the call.
// It retries while a change of both tokens and counted is under way,
// which lasts a few atomic operations.
func (t *Tenant) Admitted() int64 {
	for {
		f := t.flags.Load()
		if f&syncMask == 0 {
			c, n := t.counted.Load(), t.tokens.Load()
			if (t.flags.Load()^f)&^(syncBusy-1) == 0 {
				return c - n
			}
		}
		runtime.Gosched()
	}
}

func (t *Tenant) setFlag(f uint32, on bool) (was bool) {
	if on {
		return t.flags.Or(f)&f != 0
	}
	return t.flags.And(^f)&f != 0
}

func (t *Tenant) flag(f uint32) bool { return t.flags.Load()&f != 0 }

// init prepares a zero Tenant in place, before it is shared. lim is the
// tenant's base quota, replaced while Redis holds an override for the
// tenant, and by Syncer.Rebase.
func (t *Tenant) init(name string, lim *limits, p *Planner, now time.Time) {
	t.name = name
	t.limits.Store(lim)
	ls := &leaseState{}
	p.Init(&ls.st, name, now)
	t.lease.Store(ls)
	t.keepActive()
}

// keepActive copies t's State's lastActive, while that stamp is exact, to
// idleSince, for when it is clamped: called after every change of it (a
// plan, a new State; a revived one's is idleSince already), so that
// idleSince is the latest activity however long before the clamp, with no
// idle check in between (a refill's plan is followed by none; a round
// that calls, or passes a quiet tenant by, runs none). Kept by the idle
// checks alone, it was an earlier activity's, and a tenant active 10 days
// after it was evicted 30 days after its last request with an
// IdleTimeout of 40 (TestLongIdleTimeoutCountsLatestActivity). t.mu must
// be held, or t not yet shared.
func (t *Tenant) keepActive() {
	if ls := t.lease.Load(); ls != nil && ls.st.lastActive != stampMin {
		t.idleSince = ls.st.at(ls.st.lastActive)
	}
}

// st returns t's planner State. t.mu must be held, and t not dormant (see
// Syncer.revive).
func (t *Tenant) st() *State { return &t.lease.Load().st }

// lastActive returns when t was last active (unix nanoseconds), dormant or
// not. t.mu must be held. A State's lastActive is a stamp, clamped at
// stampMin (24.8 days before its base) when the base moves on, so that a
// tenant idle longer, and awake (its bucket refilling for months at a low
// rate, say), read as idle for at most 37 days (24.8 plus the 12.4 its
// base runs before it moves): with an IdleTimeout above that it was never
// evicted (TestLongIdleTimeoutEvictsAwakeTenant). For a clamped stamp the
// time kept before it was clamped (idleSince, keepActive) is the one.
func (t *Tenant) lastActive() int64 {
	if ls := t.lease.Load(); ls != nil {
		if ls.st.lastActive == stampMin && t.idleSince != 0 {
			return min(t.idleSince, ls.st.at(stampMin))
		}
		return ls.st.at(ls.st.lastActive)
	}
	return t.idleSince
}

// Name returns the tenant's name.
func (t *Tenant) Name() string { return t.name }

// Spend spends n leased tokens if the tenant holds at least n, and counts
// the admission. It returns whether it spent them and the tokens left (or,
// when it did not, the tokens held). It is the hot path: for n = 1 one
// compare-and-swap, no lock: the tokens spent count the admission (see
// counted). A larger n costs three atomic adds more (see spendCounting).
func (t *Tenant) Spend(n int64) (ok bool, left int64) {
	if n == 1 {
		return t.SpendOne()
	}
	return t.spendCounting(n, n-1)
}

// SpendOne is Spend(1), small enough to be inlined into the request path:
// the compare-and-swap alone.
func (t *Tenant) SpendOne() (ok bool, left int64) { return t.tokens.TrySpend(1) }

// SpendOneShared is SpendOne from the shared count of the tenant's
// counter alone (bucket.Counter.TrySpendShared): all of its tokens unless
// WithPerCPUTokens split it. It is inlined into the request path, which
// goes on to SpendOne when it fails.
func (t *Tenant) SpendOneShared() (ok bool, left int64) { return t.tokens.TrySpendShared(1) }

// SpendOneSlots is SpendOne after SpendOneShared fell short: the slots of
// a split counter at once (bucket.Counter.TrySpendSlots), the shared count
// again of one that is not split.
func (t *Tenant) SpendOneSlots() (ok bool, left int64) { return t.tokens.TrySpendSlots(1) }

// spendCounting spends n tokens, of which extra count no admission. It
// spends nothing once t is marked drained (see flagDrained): a spend of
// n > 1 that gathers from a split counter's slots puts back what it
// gathered when it falls short, and a drain that ran meanwhile left
// that in the counter of an evicted tenant, uncounted.
func (t *Tenant) spendCounting(n, extra int64) (ok bool, left int64) {
	if t.beginLive() {
		if ok, left = t.tokens.TrySpend(n); ok {
			t.counted.Add(-extra)
		}
	}
	t.endSync()
	return ok, left
}

// SpendWaited is Spend for a request that waited for its tokens: the
// caller counts the admission by its reason.
func (t *Tenant) SpendWaited(n int64) (ok bool, left int64) { return t.spendCounting(n, n) }

// Front returns the ID of the oldest grant the tenant's leased tokens
// come from, as the syncer last published it, or zero when unknown. Read
// before a spend, it names a grant no later than those of the tokens
// spent: the ledger's oldest grant only moves forward.
func (t *Tenant) Front() lease.GrantID { return lease.GrantID(t.front.Load()) }

// UnspendWaited gives back n > 0 tokens that SpendWaited took a moment
// ago for a request that was then denied after all (a multi-tenant
// decision that another tenant denied). If the syncer accounted for the
// spend in between, the tokens exceed what its ledger accounts for, and
// its next plan forfeits the excess (see Syncer.planWith), unless
// requests spend it first; and if a batch left the ledger in between,
// the tokens would live on as a later batch's, past their lease. So
// callers give back this way only when no plan ran since, holding t's
// lock (Syncer.Unspend), and without it through UnspendAt, which checks
// that the ledger's oldest grant is unchanged; otherwise they refund
// (Syncer.Refund).
//
// It does not change the count of admissions: for tokens that Spend took,
// Syncer.Uncount takes the admission back.
func (t *Tenant) UnspendWaited(n int64) {
	if n > 0 {
		t.beginSync()
		t.tokens.Add(n)
		t.counted.Add(n)
		t.endSync()
		t.quietUntil.Store(0)
	}
}

// UnspendAt is UnspendWaited without t's lock, for tokens spent while
// front (not zero) was the ledger's oldest grant (Front, read before the
// spend): it gives them back, and reports true, only while that grant is
// still the oldest (no batch has left the ledger since the spend) and
// t's counter is not being drained for good (an eviction, Close: see
// flagDrained). When it reports false it gave back nothing, and the
// caller refunds (Syncer.Refund). (Checked, then given back outside the
// bracket, as it was, a give-back that an eviction's or Close's drain
// ran between put its tokens into the drained counter: never returned
// nor forfeited, and spendable by a request that held the evicted
// tenant, an admission LeaseTotals missed: TestGiveBackDuringDrain.)
func (t *Tenant) UnspendAt(n int64, front lease.GrantID) bool {
	ok := t.unspendBegin(front)
	t.unspendEnd(n, ok)
	return ok
}

// unspendBegin and unspendEnd are UnspendAt's two halves, the check and
// the give-back, in one bracket (beginLive): apart for a test to run a
// drain between them.
func (t *Tenant) unspendBegin(front lease.GrantID) bool {
	return t.beginLive() && front != 0 && t.Front() == front
}

func (t *Tenant) unspendEnd(n int64, ok bool) {
	if ok && n > 0 {
		t.tokens.Add(n)
		t.counted.Add(n)
	}
	t.endSync()
	if ok && n > 0 {
		t.quietUntil.Store(0)
	}
}

// uncount takes back the count of an admission Spend made, and reports
// whether it did: not once t is marked evicted, when its admissions have
// moved to the registry's total (registry.remove), where Syncer.Uncount
// takes it back instead. The look at the mark is the bracket's start, so
// that the move, which marks t and then reads Admitted (which waits for
// a change under way), either counts this change or finds none.
func (t *Tenant) uncount() bool {
	defer t.endSync()
	if t.flags.Add(syncBusy)&flagEvicted != 0 {
		return false
	}
	t.counted.Add(-1)
	return true
}

// publish makes the ledger's oldest grant visible to requests (Front).
// t.mu must be held.
func (t *Tenant) publish() { t.front.Store(uint32(t.st().ledger.frontID())) }

// Held returns the leased tokens the tenant holds now.
func (t *Tenant) Held() int64 { return t.tokens.Load() }

// Limits returns the quota applied to the tenant now, resolved: its base
// quota, or that of the quota override Redis reported on the last lease
// call. It is one atomic load, for the request path. The value must not be
// modified.
func (t *Tenant) Limits() *quota.Quota { return &t.limits.Load().Quota }

// NoteMiss records that a request for n tokens found too few. It never
// blocks: the syncer picks the miss up on its next round, or at once when
// woken.
func (t *Tenant) NoteMiss(n int64) { t.note(n, n) }

// NoteNeed records that a request needs n tokens of a lease the tenant
// does not hold yet, without counting them as demand: the tokens count
// when the request spends them or misses (a multi-tenant decision asking
// for its tenants' first leases together). It never blocks.
func (t *Tenant) NoteNeed(n int64) { t.note(0, n) }

// Unmiss takes back n tokens of misses that NoteMiss recorded for a
// request that was then admitted after a wait: its tokens count as spent
// (the plan observes them leaving the counter), so that a request that
// waits counts once in the tenant's demand, not twice. Missed may then
// be negative (the miss was taken by an earlier plan, the spend comes to
// the next): see Action.Unobserved. It never blocks.
func (t *Tenant) Unmiss(n int64) { t.addMissed(-max(n, 0), 0) }

// note adds missed tokens to the misses and raises the largest n to
// need, and marks t urgent.
func (t *Tenant) note(missed, need int64) {
	t.addMissed(max(missed, 0), max(need, 0))
	t.setFlag(flagUrgent, true)
}

// addMissed adds delta (either sign) to the miss word's count, saturating
// at +-(2^31-1), and raises its largest n to need (0: unchanged).
func (t *Tenant) addMissed(delta, need int64) {
	delta = min(max(delta, -math.MaxInt32), math.MaxInt32)
	for {
		cur := t.miss.Load()
		count := min(max(int64(int32(cur))+delta, -math.MaxInt32), math.MaxInt32)
		largest := max(math.Float32frombits(uint32(cur>>32)), ceil32(need))
		if t.miss.CompareAndSwap(cur, uint64(uint32(int32(count)))|uint64(math.Float32bits(largest))<<32) {
			return
		}
	}
}

// dropUnobserved clears misses taken back that no spend offset yet (a
// negative count: Action.Unobserved), as t goes dormant: its next State
// starts its demand anew, and a count kept below zero would offset the
// spends of requests long after.
func (t *Tenant) dropUnobserved() {
	for {
		cur := t.miss.Load()
		if int32(cur) >= 0 || t.miss.CompareAndSwap(cur, cur&^math.MaxUint32) {
			return
		}
	}
}

// Failing reports whether the tenant's last lease call failed.
func (t *Tenant) Failing() bool { return t.flag(flagFailing) }

// Leased reports whether the tenant has ever been granted a lease here.
func (t *Tenant) Leased() bool { return t.flag(flagLeased) }

// Cold reports whether the syncer keeps no lease for the tenant: no
// lease call has answered for it yet (its first request), or its last
// plan found it idle (its demand too low to size a lease at a token, or
// its requests too far apart for a lease to last till the next) and no
// lease call answered nor tokens came since (save a call that brought
// in full what such a plan asked for: a waiting request's own tokens).
// A request that misses on a cold tenant may wait for a lease (the
// root's WithColdStartWait): its miss says the syncer was not keeping a lease
// for it, not that its quota was spent, and no scheduled refresh would
// bring one. A tenant whose requests come further apart than its lease
// lifetime is cold at every request; denied then at once, as a miss on
// a lease that requests spent is, it was denied nearly every request
// while its bucket stood full (TestSparseTenantAdmitted in the root
// package).
func (t *Tenant) Cold() bool { return t.flags.Load()&(flagLeased|flagIdle) != flagLeased }

// Evicted reports whether the tenant was evicted: a request holding it
// should look the tenant up again.
func (t *Tenant) Evicted() bool { return t.flag(flagEvicted) }

// Level returns the global bucket's level as this instance's last
// successful lease call for the tenant reported it, after that call's
// grant: rounded down to whole tokens, at least 0; zero before the first
// one, and while the tenant is dormant or since it was revived, until its
// next grant (it holds no token meanwhile). It is not refilled since, nor
// lowered by what other instances leased since. It is two atomic loads
// (the lease state, then its level), for the request path.
func (t *Tenant) Level() int64 {
	if ls := t.lease.Load(); ls != nil {
		return ls.level.Load()
	}
	return 0
}

// Fallback returns the tenant's local fallback bucket, or nil when its
// lease calls have not failed.
func (t *Tenant) Fallback() *bucket.TokenBucket {
	if ls := t.lease.Load(); ls != nil {
		if fb := ls.fallback.Load(); fb != nil {
			return &fb.TokenBucket
		}
	}
	return nil
}

// fallback is a failing tenant's local bucket (leaseState.fallback),
// and, for Syncer.Failing, when (unix nanoseconds) the tenant's last
// lease call failed without an answer from Redis (an outage; 0 when Redis
// answered it with an error about the tenant) and the node it went to.
// It exists only while the tenant fails.
type fallback struct {
	bucket.TokenBucket
	outage atomic.Int64
	node   atomic.Pointer[redisNode]
	// shared is the rate of the rate share the tenant accrued here when
	// its calls failed, 0 for none, and sharedUntil when that accrual
	// stopped (unix nanoseconds): Planner.FallbackRate's shared and
	// until. Written and read under the tenant's lock only.
	shared      float64
	sharedUntil int64
}

// RetryAfter estimates how long after now a request for n tokens could
// succeed: the time the global bucket needs to hold what this instance
// lacks of n, as last seen (a lease call's reply, or a return's since:
// leaseState.sawReturn) and refilled at the tenant's rate since, and no
// earlier than the next lease call may be made (Syncer.setRetry; a client
// that comes back with a request of its own waits for the tick that makes
// the call: Syncer.RetryAfter).
func (t *Tenant) RetryAfter(now time.Time, n int64) time.Duration {
	var wait time.Duration
	rate := t.Limits().Rate
	// Tokens held here count toward n: only the rest must come from Redis.
	n -= t.tokens.Load()
	var retryAt int64
	var tokens float64
	seen := false
	if ls := t.lease.Load(); ls != nil {
		retryAt = ls.retryAt.Load()
		tokens, seen = ls.seenLevel(now, rate)
	}
	switch {
	case seen:
		if short := float64(n) - tokens; short > 0 {
			wait = durationCeil(short / rate)
		}
	case t.Leased():
		// Dormant, or revived since: the bucket was full then (see
		// Syncer.sleep).
	case n > 0:
		wait = durationCeil(float64(n) / rate)
	}
	if r := time.Duration(retryAt - now.UnixNano()); r > wait {
		wait = r
	}
	return wait
}

// durationCeil converts seconds to a Duration, rounding up and saturating.
func durationCeil(sec float64) time.Duration {
	ns := math.Ceil(sec * 1e9)
	if !(ns < math.MaxInt64) {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// floorLevel rounds a bucket level reported by Redis down to whole
// tokens, saturating: at least 0 (also for NaN), at most MaxInt64.
func floorLevel(tokens float64) int64 {
	switch {
	case !(tokens > 0):
		return 0
	case tokens >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(tokens)
}

// take collects what requests recorded since the last plan.
func (t *Tenant) take(level int64) Input {
	miss := t.miss.Swap(0)
	return Input{
		Level:  level,
		Missed: int64(int32(miss)),
		Need:   int64Of(math.Float32frombits(uint32(miss >> 32))),
		Urgent: t.setFlag(flagUrgent, false),
	}
}

// Snapshot is a point-in-time view of a tenant's lease, for introspection.
type Snapshot struct {
	Tokens    int64     // leased tokens held now
	Target    int64     // lease size last planned
	Demand    float64   // estimated demand, tokens per second
	Failures  int       // lease calls failed in a row
	Instances int       // instances active on the tenant, as Redis last said
	Next      time.Time // next scheduled refresh
	Slots     int       // slots the tokens are split into (Syncer.spread), 0 for one count
	// Of a dormant tenant (see Tenant) only Tokens is set (to 0 but for a
	// moment after a multi-tenant decision gave tokens back).
}

// Snapshot returns t's lease state as of its last plan. It takes the
// tenant's lock, so it waits for a lease call in flight, and releases it
// as every holder must (unlock): waking the refills that found it locked.
// (It was a method of Tenant, which released the lock without the wake:
// a refill that tried the lock while a snapshot held it waited for the
// next round's release, up to a quarter interval, and in driven mode with
// no round to come for ever: TestSnapshotWakesRefills.)
//
// It waits as a refill does (Syncer.lock), on the broadcast of unlock, not
// on the mutex: a wait on a mutex is not durable in a testing/synctest
// bubble, so a test that read a tenant (Limiter.Tenant) while its call was
// held until a fake deadline hung for good, the bubble's clock never
// moving (TestSnapshotWaitsDurably). Once the syncer is closed no
// broadcast is owed, and it waits on the mutex.
func (s *Syncer) Snapshot(t *Tenant) Snapshot {
	if !s.lock(t) {
		t.mu.Lock()
	}
	defer s.unlock(t)
	ls := t.lease.Load()
	if ls == nil {
		// Dormant: nothing planned, demanded or failed (Syncer.sleep).
		return Snapshot{Tokens: t.tokens.Load()}
	}
	st := &ls.st
	return Snapshot{
		Tokens:    t.tokens.Load(),
		Target:    st.target,
		Demand:    st.Demand(),
		Failures:  int(st.failures),
		Instances: int(st.instances),
		Next:      st.Next(),
		Slots:     t.tokens.Slots(),
	}
}

// raise sets a to n if n is larger, atomically: a running maximum.
func raise(a *atomic.Int64, n int64) {
	for {
		cur := a.Load()
		if n <= cur || a.CompareAndSwap(cur, n) {
			return
		}
	}
}
