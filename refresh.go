package leasequota

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// refresher resolves the quotas of tracked tenants again (WithQuotaFunc),
// off the request path and the syncer's loop: on a schedule with
// WithQuotaRefresh, and at once for the tenants named to Invalidate. One
// goroutine of the limiter runs it (run), or a test drives it (pass).
type refresher struct {
	wake chan struct{} // buffered 1: Invalidate wakes run
	// gen counts the calls of Invalidate. A request that tracks a new
	// tenant reads it before it resolves the quota and again once the
	// tenant is tracked: an Invalidate in between found the tenant not
	// tracked yet and did nothing, while the request may have read the
	// quota before the change (track).
	gen atomic.Uint64

	mu      sync.Mutex
	pending map[string]struct{} // guarded by mu: tenants named to Invalidate
	last    int64               // guarded by mu: unix ns the last pass covered up to
}

// Invalidate makes this instance resolve tenant's quota again with the
// WithQuotaFunc function: soon after the call, in the limiter's
// background goroutine (never in the caller's, nor on the request path),
// and with WithManualSync in the test's next driven pass. Use it when a
// tenant's plan changed where the function reads it. It affects this
// instance only: call it on each instance, or let WithQuotaRefresh bring
// the change everywhere; SetQuota changes a quota on every instance at
// once.
//
// The new quota applies as a SetQuota change does: requests apply it
// from then on (Decision.Quota), tokens already leased at the old quota
// stay spendable until their lease expires, and the tenant's next lease
// calls pass the new rate and burst to its global bucket, which refills
// at that rate and caps at that burst from then on. A quota SetQuota
// stored for the tenant stays in force over it. A new quota that is
// invalid is logged and not applied. Invalidate does nothing for a tenant
// this instance does not track (its next request resolves its quota
// anyway), without WithQuotaFunc, or after Close.
func (l *Limiter) Invalidate(tenant string) {
	if l.cfg.quotaFunc == nil || l.closed.Load() {
		return
	}
	l.refresh.gen.Add(1) // before the lookup: see refresher.gen
	l.invalidate(tenant)
}

// invalidate queues tenant for the refresher, if tracked, and wakes it. It
// does not count as a call of Invalidate in refresher.gen: track calls it
// for a tenant whose quota an Invalidate may have missed, and counted,
// that call made every new tenant whose quota was being read meanwhile
// ask again too, and each of those the next ones
// (TestInvalidateDuringTrackDoesNotChain).
func (l *Limiter) invalidate(tenant string) {
	if l.sync.Tenant(tenant) == nil {
		return
	}
	r := &l.refresh
	r.mu.Lock()
	if r.pending == nil {
		r.pending = map[string]struct{}{}
	}
	r.pending[tenant] = struct{}{}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// runRefresh is the refresher's goroutine: a pass every refresh interval
// with WithQuotaRefresh, and one whenever Invalidate wakes it, until ctx
// is done. A pass in progress finishes the QuotaFunc call it is in first.
func (l *Limiter) runRefresh(ctx context.Context) error {
	var tick <-chan time.Time
	if l.cfg.quotaRefreshSet {
		t := time.NewTicker(l.cfg.refreshInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		case <-l.refresh.wake:
		}
		l.refreshQuotas(ctx)
	}
}

// refreshQuotas resolves again the quotas of the tenants named to
// Invalidate and, with WithQuotaRefresh, of those whose phase fell since
// the last pass, and rebases each whose quota changed. It stops early
// when ctx is done.
func (l *Limiter) refreshQuotas(ctx context.Context) {
	now := l.cfg.now().UnixNano()
	r := &l.refresh
	r.mu.Lock()
	pending := r.pending
	r.pending = nil
	last := r.last
	r.last = now
	r.mu.Unlock()

	for name := range pending {
		if ctx.Err() != nil {
			return
		}
		l.reresolve(name)
	}
	if !l.cfg.quotaRefreshSet || now <= last {
		return
	}
	d := int64(l.cfg.quotaRefresh)
	for t := range l.sync.Tenants() {
		if ctx.Err() != nil {
			return
		}
		// The tenant is due when a time phase + k*d fell in (last, now]:
		// each tenant once per d, the tenants spread over d. The phase
		// is the 32-bit hash as a fraction of d (hash/2^32 * d), where
		// hash mod d put every phase in the first 4.29 s (2^32 ns) of a
		// longer period: an hour's refreshes all came in its first
		// seconds, on every instance at once.
		phase, _ := bits.Mul64(uint64(t.Hash())<<32, uint64(d))
		if _, done := pending[t.Name()]; done || floorDiv(now-int64(phase), d) == floorDiv(last-int64(phase), d) {
			continue
		}
		l.reresolve(t.Name())
	}
}

// reresolve resolves tenant's configured quota again and applies it when
// it changed. An invalid one is logged and not applied, and so is a call
// of the quota function that panics: it runs in the limiter's goroutine,
// where no caller could recover the panic (TestQuotaFuncPanicInRefresh).
func (l *Limiter) reresolve(tenant string) {
	t := l.sync.Tenant(tenant)
	if t == nil {
		return
	}
	q, err := l.baseQuotaRecovered(tenant)
	if err != nil {
		l.cfg.logger.Warn("leasequota: the quota function returned an invalid quota for a tracked tenant; keeping its quota",
			"tenant", truncate(tenant), "error", err)
		return
	}
	l.sync.Rebase(t, q)
}

// baseQuotaRecovered is baseQuota, with a panic of the quota function
// returned as an error wrapping ErrInvalidQuota.
func (l *Limiter) baseQuotaRecovered(tenant string) (q Quota, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the quota function panicked: %v", ErrInvalidQuota, r)
		}
	}()
	return l.baseQuota(tenant)
}

// floorDiv is a/b rounded toward negative infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
