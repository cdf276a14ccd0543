package syncer

// Stats are running totals of what a Syncer did. All fields but Window
// only grow.
type Stats struct {
	Calls     int64 // lease round trips to Redis (a pipeline counts once)
	Errors    int64 // lease calls (per tenant) that failed
	Requested int64 // tokens asked of Redis (not in calls the circuit breaker refused)
	Granted   int64 // tokens granted
	Returned  int64 // tokens given back to Redis and credited there (expiry, eviction, Close, Refund)
	Forfeited int64 // tokens given back that Redis did not credit, whose return failed, or that were not returned (expired into a bucket refilled to full)
	Expired   int64 // leased tokens taken back unspent at the end of their lifetime (then returned, or forfeited without a call: Forfeited)
	Evicted   int64 // tenants evicted (idle or over MaxTenants)
	Refunded  int64 // tokens refunded (Refund), whatever became of them
	// HeldBack counts the acquires held back because the call budget was
	// spent (Redis busy); CallWindow is the budget's window now (script
	// calls this instance may have in flight) and WindowCuts how often it
	// was halved. In Cluster mode each master has a budget of its own:
	// CallWindow is the smallest of their windows (the busiest master's)
	// among the masters called within the last two idle timeouts or lease
	// TTLs (a master address left by a failover is forgotten then),
	// WindowCuts the sum.
	HeldBack, CallWindow, WindowCuts int64
	// Reserved counts the granted tokens that were reserved (part of
	// Granted; see Config.Reserve), and Dripped those of them that came
	// due here. Reserved tokens of a tenant drained before they came
	// due (eviction, Close) are the difference, less those still to come.
	Reserved, Dripped int64
	// Instances is the fleet's size as the last count of its roster gave
	// it (lease.InstanceCounter; every lease TTL): what the call budget's
	// floor is divided by, unless a tenant's registry reported more. 0
	// before the first count, or with a store that cannot count or
	// refused the roster for good.
	Instances int64
}

// Stats returns the running totals.
func (s *Syncer) Stats() Stats {
	window, cuts := s.windows()
	return Stats{
		Calls:      s.calls.Load(),
		Errors:     s.errs.Load(),
		Requested:  s.requested.Load(),
		Granted:    s.granted.Load(),
		Returned:   s.returned.Load(),
		Forfeited:  s.forfeited.Load(),
		Expired:    s.expired.Load(),
		Evicted:    s.evicted.Load(),
		Refunded:   s.refunded.Load(),
		HeldBack:   s.heldBack.Load(),
		CallWindow: int64(window),
		WindowCuts: cuts,
		Reserved:   s.reserved.Load(),
		Dripped:    s.dripped.Load(),
		Instances:  s.roster.n.Load(),
	}
}
