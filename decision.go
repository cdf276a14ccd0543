package leasequota

import (
	"time"

	"github.com/leasequota/leasequota/lease"
)

// Decision is the outcome of AllowN, WaitN, AllowAll or WaitAll. It is a
// small value, returned without allocation.
type Decision struct {
	// Allowed reports whether the n tokens were admitted.
	Allowed bool
	// Remaining is the number of tokens this instance can still spend now
	// for the tenant without asking Redis (its leased tokens). For a
	// tenant whose tokens are split per CPU (WithPerCPUTokens) it is a
	// lower bound: the tokens of the slot of the CPU the request ran on
	// and of the shared count, not those of the other slots (about one
	// slot's share of what the instance holds), as reading every slot on
	// every decision would cost what the split saves.
	Remaining int64
	// FleetRemaining estimates the tokens the whole fleet can still spend
	// for the tenant: Remaining plus the global bucket's level as this
	// instance's last successful lease call for the tenant left it
	// (rounded down to whole tokens; zero before the first such call), at
	// most Quota.Burst and never less than Remaining (which may be more
	// than Burst: a rate share's accrued tokens, or tokens leased before
	// a quota lowered the burst, which stay spendable). It is what this
	// instance knows without asking Redis: the bucket's refill since that
	// call is not added, what other instances leased from the bucket since
	// is not taken off, and the tokens they hold are not counted. A
	// decision with no lease of the tenant behind it (by a failure mode,
	// on invalid input) has it zero, like Remaining. The
	// HTTP middleware and the gRPC interceptors send it as RateLimit's r.
	FleetRemaining int64
	// RetryAfter, when denied, estimates how long until n tokens could be
	// admitted. It is zero when Allowed, and zero when n can never be
	// admitted (see Reason). Before the tenant's first lease here
	// (ReasonColdStart, nothing known of the global bucket yet) it is at
	// most the refresh interval, within which the first lease comes.
	RetryAfter time.Duration
	// Quota is the tenant's quota, with defaults resolved.
	Quota Quota
	// Reason says how the decision was reached.
	Reason Reason
	// Mode is the failure mode that decided, when Redis could not be
	// reached and the lease was spent; FailDefault (zero) for a decision
	// made normally.
	Mode FailureMode
	// Tenant is the tenant that decided: the one asked for by AllowN and
	// WaitN; for AllowAll and WaitAll the one that denied or, when
	// allowed, the one with the least Remaining. Remaining, RetryAfter,
	// Quota, Reason and Mode are that tenant's. It is the caller's own
	// string, not a copy. Empty only when no tenant decided: AllowAll or
	// WaitAll given no tenant (ReasonNoTenants), or given several and
	// finding the limiter closed as it begins (ReasonClosed; closed while
	// the call waits, it names the tenant it waited for).
	Tenant string

	// adm is what the decision admitted from leases, for Refund.
	adm admission
}

// admission is what a Decision admitted from leases, for Refund: n tokens
// from each of keys tenants, the first four spent with the grant IDs in
// front (each read before its spend: zero when not from a lease, see
// modes, or when its grant is unknown) at the syncer's clock. Zero when
// nothing was admitted from a lease, and after a Refund.
type admission struct {
	n     int64
	clock int64
	sum   uint64 // keys > 1: the tenants' fingerprint (sumHashes)
	front [maxRefundKeys]lease.GrantID
	keys  int32
	plans uint32 // the syncer's Plans() before the spend (giveBack)
	// modes marks the first maxRefundKeys tenants (bit i: the i'th) that
	// their failure mode admitted: nothing was leased for them. A zero
	// front of a tenant not marked is a lease's token of an unknown grant
	// (a rate share's), which Refund forfeits and counts.
	modes uint8
	// tailModes counts the tenants after the first maxRefundKeys that
	// their failure mode admitted. Refund forfeits the tokens of the
	// others there (their grants are not kept), and counts nothing for
	// these: which ones they were does not matter, only how many.
	// (Unmarked, a fifth tenant admitted by FailOpen was counted
	// refunded and forfeited: TestRefundSkipsFifthTenantAdmittedByMode.)
	tailModes int32
}

// maxRefundKeys is how many tenants of an AllowAll decision a Refund can
// give tokens back to; those after them are forfeited (see Refund).
const maxRefundKeys = 4

// Reason says how a Decision was reached.
type Reason uint8

const (
	// ReasonLeased: decided from tokens this instance already held.
	ReasonLeased Reason = iota + 1
	// ReasonColdStart: the syncer kept no lease for the tenant on this
	// instance (none yet, or its demand here too low or too sparse to
	// keep one: see WithColdStartWait); the request waited for a lease
	// (bounded by WithColdStartWait and ctx), then was decided.
	ReasonColdStart
	// ReasonRefilled: the lease ran out and the request waited for a fresh
	// one (WithMaxWait, or WaitN), then was admitted.
	ReasonRefilled
	// ReasonExhausted: denied, the lease ran out and no fresh tokens came
	// in time; the tenant's global quota is spent or being refilled.
	ReasonExhausted
	// ReasonUnavailable: denied, Redis could not be reached (error or
	// timeout), the tenant's lease is spent and its mode is FailClosed.
	ReasonUnavailable
	// ReasonFallback: Redis could not be reached and the tenant's lease is
	// spent; FailLocal decided from the local fallback bucket (Allowed
	// says which way).
	ReasonFallback
	// ReasonFailOpen: admitted without a lease, Redis could not be reached
	// and the tenant's mode is FailOpen.
	ReasonFailOpen
	// ReasonTooManyTenants: denied, the tenant is new and the limiter
	// tracks twice WithMaxTenants already; eviction is catching up.
	ReasonTooManyTenants
	// ReasonInvalidN: denied, n <= 0 or n > Burst.
	ReasonInvalidN
	// ReasonInvalidQuota: denied, the tenant's quota (from WithQuotaFunc)
	// is invalid. Nothing was sent to Redis.
	ReasonInvalidQuota
	// ReasonClosed: denied, the limiter is closed.
	ReasonClosed
	// ReasonNoTenants: denied, AllowAll or WaitAll was given no tenant.
	ReasonNoTenants
	// ReasonDuplicateTenant: denied, AllowAll or WaitAll was given the same
	// tenant twice (Decision.Tenant names it). Nothing was spent: a tenant
	// is never charged twice by one decision.
	ReasonDuplicateTenant

	numReasons // one past the last reason
)

var reasonNames = [...]string{
	ReasonLeased:          "leased",
	ReasonColdStart:       "cold_start",
	ReasonRefilled:        "refilled",
	ReasonExhausted:       "exhausted",
	ReasonUnavailable:     "unavailable",
	ReasonFallback:        "fallback",
	ReasonFailOpen:        "fail_open",
	ReasonTooManyTenants:  "too_many_tenants",
	ReasonInvalidN:        "invalid_n",
	ReasonInvalidQuota:    "invalid_quota",
	ReasonClosed:          "closed",
	ReasonNoTenants:       "no_tenants",
	ReasonDuplicateTenant: "duplicate_tenant",
}

// Waitable reports whether a denial for reason r may turn into an
// admission by waiting a little: the lease ran out (or never came), or the
// local fallback bucket of a Redis outage is empty. RetryAfter then
// estimates the wait.
func (r Reason) Waitable() bool {
	switch r {
	case ReasonExhausted, ReasonColdStart, ReasonFallback:
		return true
	}
	return false
}

// String returns the reason in snake case, as used in metrics and logs.
func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "unknown"
}
