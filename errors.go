package leasequota

import (
	"errors"

	"github.com/leasequota/leasequota/quota"
)

var (
	// ErrInvalidQuota is wrapped by errors about a Quota, naming the field.
	// It is quota.ErrInvalid, which Quota.Validate wraps.
	ErrInvalidQuota = quota.ErrInvalid
	// ErrInvalidOption is wrapped by errors about an Option passed to New.
	ErrInvalidOption = errors.New("leasequota: invalid option")
	// ErrInvalidN is returned by WaitN for n <= 0.
	ErrInvalidN = errors.New("leasequota: n must be positive")
	// ErrExceedsBurst is returned by WaitN when n is above the tenant's
	// Burst: such a request can never be admitted.
	ErrExceedsBurst = errors.New("leasequota: n exceeds burst")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("leasequota: limiter closed")
	// ErrNoTenants is returned by WaitAll when given no tenant.
	ErrNoTenants = errors.New("leasequota: no tenants")
	// ErrDuplicateTenant is returned by WaitAll when given a tenant twice.
	ErrDuplicateTenant = errors.New("leasequota: duplicate tenant")
	// ErrNotRefundable is wrapped by Refund's error when the Decision has
	// nothing to refund: it denied, admitted without a lease (a failure
	// mode), was refunded already, or the tenants named are not those it
	// decided for.
	ErrNotRefundable = errors.New("leasequota: nothing to refund")
	// ErrUnavailable is wrapped, with ctx's error, by WaitN's error when
	// its ctx ended while Redis could not be reached and the tenant's lease
	// was spent.
	ErrUnavailable = errors.New("leasequota: redis unavailable")
	// ErrUnnamedQuota is wrapped by the error ListQuotas yields with a
	// quota stored, by an earlier release, for a tenant whose key does not
	// give its name back (see ListQuotas).
	ErrUnnamedQuota = errors.New("leasequota: stored quota without its tenant's name")
)
