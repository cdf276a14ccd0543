package leasequota

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// SetQuota stores q as tenant's quota in Redis, next to the tenant's
// bucket, where it overrides WithDefaultQuota and WithQuotaFunc on every
// instance sharing the Redis and key prefix: the scripts refill and cap the
// bucket with q's Rate and Burst from this call on, and every instance
// serving the tenant applies q (Decision.Quota, Tenant) after its next
// lease call. SetQuota raises the prefix's quota version, which each
// instance polls every half refresh interval; when it moved, every tenant
// active on the instance makes a lease call in the round after the poll
// returns, so the change applies within about half an interval plus two
// rounds (a round is a quarter interval). Zero lease fields
// of q mean each instance's defaults, as in WithDefaultQuota.
//
// The change keeps the bucket consistent: it is refilled at the old rate
// up to the change, capped at the new Burst, and refilled at the new Rate
// from then on. Tokens already leased to instances stay spendable until
// their lease expires (at most one LeaseTTL).
//
// q is validated like a quota given to New (Quota.Validate, and a nonzero
// LeaseTTL of at least twice this limiter's refresh interval); errors wrap
// ErrInvalidQuota and nothing is written. The override has no expiry:
// DeleteQuota removes it. An error wrapping lease.ErrQuotaVersion says
// the override was stored but the instances were not told by the quota
// version: each learns it at its tenant's next lease call instead.
func (l *Limiter) SetQuota(ctx context.Context, tenant string, q Quota) error {
	if err := l.defaults.Check(q); err != nil {
		return opError("SetQuota", tenant, err)
	}
	base, err := l.baseQuota(tenant)
	if err != nil {
		// No usable configured quota: the bucket was never filled by it,
		// so take q as the quota in force before the override.
		base = q
	}
	if _, err := l.leases.SetOverride(ctx, tenant, quota.Bucket(base), quota.ToOverride(q)); err != nil {
		return opError("SetQuota", tenant, err)
	}
	return nil
}

// GetQuota returns the quota SetQuota stored for tenant, as it was given
// (zero lease fields unresolved), and false when none is stored (the
// configured quota applies).
func (l *Limiter) GetQuota(ctx context.Context, tenant string) (Quota, bool, error) {
	o, err := l.leases.GetOverride(ctx, tenant)
	if err != nil {
		return Quota{}, false, opError("GetQuota", tenant, err)
	}
	if o == nil {
		return Quota{}, false, nil
	}
	return quota.FromOverride(*o), true, nil
}

// DeleteQuota removes the quota SetQuota stored for tenant, so that the
// configured quota (WithQuotaFunc or WithDefaultQuota) applies again, on
// every instance within a refresh interval. The bucket is kept consistent
// as by SetQuota. Deleting when none is stored is not an error. It fails
// with an error wrapping ErrInvalidQuota when the configured quota of the
// tenant is invalid.
func (l *Limiter) DeleteQuota(ctx context.Context, tenant string) error {
	base, err := l.baseQuota(tenant)
	if err != nil {
		return opError("DeleteQuota", tenant, err)
	}
	if _, err := l.leases.DeleteOverride(ctx, tenant, quota.Bucket(base)); err != nil {
		return opError("DeleteQuota", tenant, err)
	}
	return nil
}

// TenantQuota is a quota SetQuota stored, as ListQuotas finds it.
type TenantQuota struct {
	// Tenant is the tenant it is stored for: what SetQuota was given. It
	// is "" only with an error wrapping ErrUnnamedQuota (a tenant may be
	// "" too).
	Tenant string
	// Quota is the quota as SetQuota was given it, as GetQuota returns it
	// (zero lease fields unresolved).
	Quota Quota
	// Key is the Redis key the quota is stored at, which identifies it
	// when Tenant is unknown. A Limiter made by NewWithStore on a
	// *memstore.Store gives the key under the prefix "".
	Key string
}

// ListQuotas returns an iterator over the quotas SetQuota stored under
// this limiter's key prefix, in no particular order:
//
//	for tq, err := range l.ListQuotas(ctx) {
//		if err != nil { ... }
//		fmt.Println(tq.Tenant, tq.Quota.Rate, tq.Quota.Burst)
//	}
//
// It reads Redis with SCAN (never KEYS) on every master of a Redis Cluster,
// or on the one server, a page of keys at a time (lease.ListScanCount), and
// reads each page's quotas in one pipeline: it makes no call per tenant,
// does not touch the syncer and runs alongside it. The key prefix's glob
// characters match only themselves.
//
// The iterator yields each quota with a nil error, or an error:
//
//   - about one stored quota, with its Key; listing goes on after it. It
//     wraps ErrUnnamedQuota for a quota stored by a release of this module
//     before the tenant's name was stored with it, for a tenant longer
//     than 128 bytes (whose key is a hash, see docs/design.md): its Quota
//     is filled, its Tenant unknown. SetQuota for the tenant again stores
//     the name. Any other error about one quota is a key that cannot be
//     read as one (corrupt, or written by something else).
//   - about the listing: a Redis call failed, or ctx is done (checked
//     before each yield). It is the last one yielded.
//
// As with SCAN, a quota stored for the whole listing is yielded at least
// once; one set or deleted meanwhile may or may not be (a deleted one is
// never yielded with a zero Quota), and one may be yielded twice (Redis
// rehashing its keyspace): keep the keys seen when each must be handled
// once. On a Redis Cluster whose slots move during the listing (a
// reshard), a quota may be yielded twice or missed (lease.Client's
// ListOverrides): list again once the reshard is done. The operator's
// command, which has no Limiter, lists with lease.NewClient(rdb,
// prefix).ListOverrides, which this method wraps.
func (l *Limiter) ListQuotas(ctx context.Context) iter.Seq2[TenantQuota, error] {
	return func(yield func(TenantQuota, error) bool) {
		for lo, err := range l.leases.ListOverrides(ctx) {
			tq := TenantQuota{Tenant: lo.Tenant, Key: lo.Key}
			if err == nil || errors.Is(err, lease.ErrNameUnknown) {
				tq.Quota = quota.FromOverride(lo.Override)
			}
			if errors.Is(err, lease.ErrNameUnknown) {
				err = fmt.Errorf("%w: ListQuotas: %q: set the tenant's quota again to store its name", ErrUnnamedQuota, lo.Key)
			} else if err != nil {
				err = &opErr{call: "ListQuotas", err: err}
			}
			if !yield(tq, err) {
				return
			}
		}
	}
}

// pkgPrefix starts every error message of this package, once.
const pkgPrefix = "leasequota: "

// opErr is an error of a Limiter method (about one tenant, but for
// ListQuotas). The method
// names the operation, so its message drops the package prefixes of the
// errors it wraps ("leasequota: " of this package's sentinels and of the
// scripts' error replies, "lease: " of package lease), and reads
//
//	leasequota: invalid quota: SetQuota("acme"): Rate is NaN, …
//
// for an error that wraps one of this package's sentinel errors, and
//
//	leasequota: GetQuota("acme"): get quota: dial tcp …
//
// for any other. errors.Is and errors.As see the wrapped error.
type opErr struct {
	call string // the method and its tenant, e.g. SetQuota("acme") (cut to 64 bytes); ListQuotas
	err  error
}

// opError wraps err, returned by op for tenant.
func opError(op, tenant string, err error) error {
	return &opErr{call: fmt.Sprintf("%s(%q)", op, truncate(tenant)), err: err}
}

func (e *opErr) Unwrap() error { return e.err }

func (e *opErr) Error() string {
	call := e.call
	msg := stripPrefixes(e.err.Error())
	for _, s := range []error{ErrInvalidQuota, ErrInvalidOption, ErrInvalidN, ErrExceedsBurst, ErrClosed, ErrUnavailable} {
		what := strings.TrimPrefix(s.Error(), pkgPrefix)
		if !errors.Is(e.err, s) || !strings.HasPrefix(msg, what) {
			continue
		}
		if rest := strings.TrimPrefix(msg[len(what):], ": "); rest != "" {
			return pkgPrefix + what + ": " + call + ": " + rest
		}
		return pkgPrefix + what + ": " + call
	}
	return pkgPrefix + call + ": " + msg
}

// stripPrefixes removes the package prefixes "leasequota: " and "lease: "
// from the start of msg and from the start of every part of it (after
// ": ").
func stripPrefixes(msg string) string {
	for _, p := range []string{pkgPrefix, "lease: ", "memstore: "} {
		msg = strings.TrimPrefix(msg, p)
		msg = strings.ReplaceAll(msg, ": "+p, ": ")
	}
	return msg
}
