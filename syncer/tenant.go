package syncer

import (
	"math"
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
// There is one per tenant, so it is packed: 192 bytes with its State, a
// size class of its own (TestRecordSizes). What only some tenants need is
// allocated apart while they need it: the ledger's batches while tokens
// are leased (48 bytes), a reservation while reserved tokens are to come
// (24), the fallback bucket once Redis has failed. Its name is the one
// copy the registry has: its table holds the Tenant (see table).
type Tenant struct {
	// tokens are the leased tokens requests spend from.
	tokens bucket.Counter
	// admits counts requests admitted from tokens without a wait (Spend).
	admits atomic.Int64
	// name is the tenant's name: its key in Redis and in the registry.
	name string

	// limits is the quota in force: the tenant's base limits, or those of
	// the override Redis reported on the last lease call (which point back
	// to the base). Swapped by the syncer, read by requests.
	limits atomic.Pointer[limits]

	// Written by requests on a miss, read and reset by the syncer (with
	// flagUrgent).
	missed atomic.Int64 // tokens denied since the last plan
	need   atomic.Int64 // largest n denied since the last plan

	// Written by the syncer, read by requests.
	retryAt atomic.Int64 // unix nanoseconds before which no lease call is made
	// emptyAt is when the global bucket, as the last lease call saw it and
	// refilling at the tenant's rate, was empty (unix nanoseconds): it holds
	// (now - emptyAt) * rate tokens now. One number instead of a level and
	// a time.
	emptyAt atomic.Int64
	// level is the global bucket's level, in whole tokens, as the last
	// successful lease call reported it (after its grant): see Level.
	level atomic.Int64

	// fallback is the local bucket of the fallback mode, made on the first
	// failure and retuned by the syncer while failures go on.
	fallback atomic.Pointer[bucket.TokenBucket]

	flags atomic.Uint32 // flagUrgent and flagRefunded (requests, syncer), the rest by the syncer
	// front is the ID of the oldest grant in the ledger (zero when it is
	// empty or the ID unknown), published by the syncer after each change
	// of the ledger. A request reads it before it spends: the tokens it
	// spends come from that grant or a later one (see Refund).
	front atomic.Uint32

	mu sync.Mutex // guards st; held across a lease call for this tenant
	st State
}

// Tenant.flags.
const (
	flagUrgent  uint32 = 1 << iota // a request ran short since the last plan
	flagFailing                    // the last lease call failed
	flagLeased                     // a lease call has succeeded at least once
	flagEvicted                    // removed from the syncer's tenants; never leased again
	// flagRefunded: a refund of the tenant's tokens went to the syncer's
	// pending returns (Refund) since the last round planned it. Set by
	// requests, after the return is queued; taken by rounds only (see
	// Input.Refunded).
	flagRefunded
)

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
	p.Init(&t.st, name, now)
}

// Name returns the tenant's name.
func (t *Tenant) Name() string { return t.name }

// Spend spends n leased tokens if the tenant holds at least n, and counts
// the admission. It returns whether it spent them and the tokens left (or,
// when it did not, the tokens held). It is the hot path: one
// compare-and-swap and one atomic add, no lock.
func (t *Tenant) Spend(n int64) (ok bool, left int64) {
	ok, left = t.tokens.TrySpend(n)
	if ok {
		t.admits.Add(1)
	}
	return ok, left
}

// SpendWaited is Spend for a request that waited for its tokens: the
// caller counts the admission by its reason.
func (t *Tenant) SpendWaited(n int64) (ok bool, left int64) { return t.tokens.TrySpend(n) }

// Front returns the ID of the oldest grant the tenant's leased tokens
// come from, as the syncer last published it, or zero when unknown. Read
// before a spend, it names a grant no later than those of the tokens
// spent: the ledger's oldest grant only moves forward.
func (t *Tenant) Front() lease.GrantID { return lease.GrantID(t.front.Load()) }

// UnspendWaited gives back n > 0 tokens that SpendWaited took a moment
// ago for a request that was then denied after all (a multi-tenant
// decision that another tenant denied). It is lock-free: if the syncer
// accounted for the spend in between, the tokens exceed what its ledger
// accounts for, and its next plan forfeits the excess (see
// Syncer.planWith), so that no token outlives its lease.
func (t *Tenant) UnspendWaited(n int64) {
	if n > 0 {
		t.tokens.Add(n)
	}
}

// CountAdmit counts an admission from the tenant's lease made with
// SpendWaited, as Spend counts its own.
func (t *Tenant) CountAdmit() { t.admits.Add(1) }

// Uncount takes back the count of an admission Spend made, for a
// multi-tenant decision that gave its tokens back.
func (t *Tenant) Uncount() { t.admits.Add(-1) }

// publish makes the ledger's oldest grant visible to requests (Front).
// t.mu must be held.
func (t *Tenant) publish() { t.front.Store(uint32(t.st.ledger.frontID())) }

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
func (t *Tenant) NoteMiss(n int64) {
	t.missed.Add(n)
	raise(&t.need, n)
	t.setFlag(flagUrgent, true)
}

// Failing reports whether the tenant's last lease call failed.
func (t *Tenant) Failing() bool { return t.flag(flagFailing) }

// Leased reports whether the tenant has ever been granted a lease here.
func (t *Tenant) Leased() bool { return t.flag(flagLeased) }

// Evicted reports whether the tenant was evicted: a request holding it
// should look the tenant up again.
func (t *Tenant) Evicted() bool { return t.flag(flagEvicted) }

// Level returns the global bucket's level as this instance's last
// successful lease call for the tenant reported it, after that call's
// grant: rounded down to whole tokens, at least 0; zero before the first
// one. It is not refilled since, nor lowered by what other instances
// leased since. It is one atomic load, for the request path.
func (t *Tenant) Level() int64 { return t.level.Load() }

// Fallback returns the tenant's local fallback bucket, or nil when its
// lease calls have not failed.
func (t *Tenant) Fallback() *bucket.TokenBucket { return t.fallback.Load() }

// RetryAfter estimates how long after now a request for n tokens could
// succeed: the time the global bucket needs to hold what this instance
// lacks of n, as last seen and refilled at the tenant's rate since, and no
// earlier than the next lease call may be made.
func (t *Tenant) RetryAfter(now time.Time, n int64) time.Duration {
	var wait time.Duration
	rate := t.Limits().Rate
	// Tokens held here count toward n: only the rest must come from Redis.
	n -= t.tokens.Load()
	if at := t.emptyAt.Load(); at != 0 {
		tokens := float64(now.UnixNano()-at) / 1e9 * rate
		if short := float64(n) - tokens; short > 0 {
			wait = durationCeil(short / rate)
		}
	} else if n > 0 {
		wait = durationCeil(float64(n) / rate)
	}
	if r := time.Duration(t.retryAt.Load() - now.UnixNano()); r > wait {
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
	return Input{
		Level:  level,
		Missed: t.missed.Swap(0),
		Need:   t.need.Swap(0),
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
}

// Snapshot returns the tenant's lease state as of its last plan. It takes
// the tenant's lock, so it waits for a lease call in flight.
func (t *Tenant) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Snapshot{
		Tokens:    t.tokens.Load(),
		Target:    t.st.target,
		Demand:    t.st.Demand(),
		Failures:  int(t.st.failures),
		Instances: int(t.st.instances),
		Next:      t.st.Next(),
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
