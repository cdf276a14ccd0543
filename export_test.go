package leasequota

import "context"

// MaxTurnsWithoutWait is the most turns any one decision of l took in its
// slow path without waiting in between (see decide): 1 for a decision
// made at once, and never more than a few, or the path spun.
func MaxTurnsWithoutWait(l *Limiter) int64 { return l.turns.max.Load() }

// WithManualSync makes New start no syncer loop: the test drives it with
// SyncRefills, SyncUrgent, SyncTick and SyncDeliver, as the deterministic
// simulation does. The syncer runs in driven mode (syncer.Options.Driven):
// refills are queued for SyncRefills, not run in goroutines of their own,
// and the requests they wake wait for SyncDeliver.
func WithManualSync() Option { return func(c *config) { c.manualSync = true } }

// SyncTick runs one scheduled syncer round of l (syncer.Syncer.Tick).
func SyncTick(l *Limiter, ctx context.Context) { l.sync.Tick(ctx) }

// SyncUrgent runs one round over the tenants queued short, if any
// (syncer.Syncer.Urgent), and reports whether there were any.
func SyncUrgent(l *Limiter, ctx context.Context) bool { return l.sync.Urgent(ctx) }

// WithInstanceID sets l's id in the instance registries (random by
// default), so that a simulation reproduces exactly.
func WithInstanceID(id string) Option { return func(c *config) { c.instanceID = id } }

// SyncRefills runs the urgent refills queued by waiting requests
// (syncer.Syncer.Refills), and reports whether there were any.
func SyncRefills(l *Limiter, ctx context.Context) bool { return l.sync.Refills(ctx) }

// SyncDeliver wakes the requests that the steps since the last
// SyncDeliver answered (syncer.Syncer.Deliver): call it at the end of each
// step.
func SyncDeliver(l *Limiter) { l.sync.Deliver() }

// SyncQuotas runs one pass of l's quota refresher (WithQuotaRefresh,
// Invalidate) in the caller, at l's clock: with WithManualSync, New starts
// no refresher goroutine.
func SyncQuotas(l *Limiter) { l.refreshQuotas(context.Background()) }

// DormantTenants returns the number of l's tenants that are dormant
// (syncer.Syncer.Dormant).
func DormantTenants(l *Limiter) int { return l.sync.Dormant() }

// TenantCold reports whether a request of tenant on l may wait for a
// lease as a cold one (syncer.Tenant.Cold): l does not track it, or it
// holds no lease there and no lease call has answered for it since.
func TenantCold(l *Limiter, tenant string) bool {
	t := l.sync.Tenant(tenant)
	return t == nil || t.Cold()
}

// LeaseTokens returns what l's utilization gauge counts from: the tokens
// that came to the leases (granted at once, reserved ones as they came
// due), those returned and forfeited, and the leased tokens held now.
func LeaseTokens(l *Limiter) (in, returned, forfeited, held int64) {
	st := l.sync.Stats()
	_, held = l.sync.LeaseTotals()
	return st.Granted - st.Reserved + st.Dripped, st.Returned, st.Forfeited, held
}
