package leasequota

import "github.com/leasequota/leasequota/telemetry"

// count records a decision made off the hot path and returns it.
func (l *Limiter) count(d Decision) Decision {
	l.addCount(d, 1)
	return d
}

// uncount takes back the count of d, a decision that count counted and
// that a later one replaced as the answer of the same call.
func (l *Limiter) uncount(d Decision) { l.addCount(d, -1) }

// addCount adds delta to the count of d's reason and outcome.
func (l *Limiter) addCount(d Decision, delta int64) {
	i := 0
	if d.Allowed {
		i = 1
	}
	if d.Reason < numReasons {
		l.decisions[d.Reason][i].Add(delta)
	}
}

// Stats are running totals of a Limiter's lease traffic and decisions:
// every count only grows, but for Decisions, which a call in flight may
// take back for a moment, when a later decision replaces ones it counted
// as the call's answer (a multi-tenant decision's turn given back, and
// its tenants' failure-mode admissions when it ends denied, several at
// once; the denial that an AllowNWithin or AllowAllWithin wait replaced).
// The decisions metric never falls: it reports the largest count seen.
// Degraded, CallWindow and Instances are states, not counts.
type Stats struct {
	Calls     int64 // lease round trips to Redis (a pipeline counts once)
	Errors    int64 // lease calls (per tenant) that failed
	Requested int64 // tokens asked of Redis in lease calls (not in calls the circuit breaker refused, which never reached it)
	Granted   int64 // tokens granted
	Returned  int64 // tokens given back to Redis and credited there (expiry, eviction, Close, Refund)
	Forfeited int64 // tokens given back that Redis did not credit, whose return failed, or that were not returned (expired into a bucket refilled to full)
	Expired   int64 // leased tokens taken back unspent at the end of their lifetime (then returned, or forfeited without a call: Forfeited)
	Evicted   int64 // tenants evicted (idle or over WithMaxTenants)
	Refunded  int64 // tokens given back by Refund (credited to a lease, returned or forfeited)

	// HeldBack counts the lease calls planned but not made because
	// Redis was busy: the call budget (the window of script calls the
	// limiter keeps in flight, cut when replies come slow) was full, and
	// the tenant was planned again a quarter refresh interval on, or
	// nearer its turn when a round refused it (the room goes in turns).
	// CallWindow is the budget's window now, in script calls (on a Redis
	// Cluster, the smallest of the masters' called within twice the idle
	// timeout or lease TTL, whichever is longer: each has its own, and
	// an address a failover left is forgotten then), and
	// WindowCuts how often a window was halved. A CallWindow that stays
	// small with HeldBack growing says Redis, or this process, cannot
	// run the calls the tenants need (docs/failure-modes.md, "A busy
	// Redis is not a down one").
	HeldBack, CallWindow, WindowCuts int64

	// Instances is the number of limiters sharing this one's Redis
	// prefix, as this one last counted them in the fleet's roster (every
	// lease TTL; lease.RosterKey), itself included: the call window's
	// floor is 256 script calls shared among them. 0 before the first
	// count, or when Redis refuses the roster (an ACL without its key).
	// Limiters of an earlier release are not counted; one that closed
	// left the roster (Close), and one that stopped without Close is
	// counted until its entry expires, a registry window after its last
	// count.
	Instances int64

	// Decisions counts every decision by its Reason, the hot path's
	// included (ReasonLeased). A reason that no decision had yet is
	// absent; a Reason added in a later version adds a key, not a field.
	// A call of one tenant counts one. AllowAll, WaitAll and
	// AllowAllWithin of k tenants count k admissions when they admit,
	// one per tenant under the reason that admitted that tenant
	// (ReasonLeased for tokens taken from its lease, the reason of the
	// turn that waited for it, its failure mode's), which need not be the
	// returned Decision's; when they deny, one denial, under the
	// Decision's Reason.
	Decisions map[Reason]Outcomes

	// Degraded is Limiter.Degraded: on one Redis server (or Sentinel),
	// true while the circuit breaker is open or probing; on a Redis
	// Cluster, while a tenant's last lease call failed. So on one server
	// lease calls that fail on an error reply about their command (OOM)
	// count in Errors but leave it false (docs/failure-modes.md).
	Degraded bool
}

// Outcomes counts the decisions of one Reason by outcome.
type Outcomes struct {
	Allowed, Denied int64
}

// Admitted returns the decisions that admitted, whatever their reason.
func (s Stats) Admitted() (n int64) {
	for _, o := range s.Decisions {
		n += o.Allowed
	}
	return n
}

// Stats returns the running totals. It visits every tenant, so it costs in
// proportion to the tenants tracked; call it from metrics collection, not
// per request.
func (l *Limiter) Stats() Stats {
	c := l.counts()
	ss := l.sync.Stats()
	s := Stats{
		Calls: ss.Calls, Errors: ss.Errors, Requested: ss.Requested, Granted: ss.Granted,
		Returned: ss.Returned, Forfeited: ss.Forfeited, Expired: ss.Expired, Evicted: ss.Evicted, Refunded: ss.Refunded,
		HeldBack: ss.HeldBack, CallWindow: ss.CallWindow, WindowCuts: ss.WindowCuts,
		Instances: ss.Instances,
		Decisions: map[Reason]Outcomes{},
		Degraded:  l.sync.Degraded(),
	}
	for r := Reason(1); r < numReasons; r++ {
		if o := (Outcomes{Allowed: c.allowed[r], Denied: c.denied[r]}); o != (Outcomes{}) {
			s.Decisions[r] = o
		}
	}
	return s
}

// decisionCounts are the decisions by reason, and the leased tokens held
// now, from one visit of the tenants.
type decisionCounts struct {
	allowed, denied [numReasons]int64
	held            int64
}

func (l *Limiter) counts() (c decisionCounts) {
	var leased int64
	leased, c.held = l.sync.LeaseTotals()
	for r := range c.allowed {
		c.denied[r] = l.decisions[r][0].Load()
		c.allowed[r] = l.decisions[r][1].Load()
	}
	c.allowed[ReasonLeased] += leased
	return c
}

// reasonLabels and reasonModes label the decisions metric, by Reason.
var (
	reasonLabels, reasonModes = func() (names, modes []string) {
		names = make([]string, numReasons)
		modes = make([]string, numReasons)
		for r := Reason(0); r < numReasons; r++ {
			names[r] = r.String()
		}
		modes[ReasonUnavailable] = FailClosed.String()
		modes[ReasonFallback] = FailLocal.String()
		modes[ReasonFailOpen] = FailOpen.String()
		return names, modes
	}()
)

// collect fills a telemetry snapshot; the SDK calls it when it collects.
func (l *Limiter) collect(s *telemetry.Snapshot) {
	c := l.counts()
	st := l.sync.Stats()
	s.Allowed = append(s.Allowed, c.allowed[:]...)
	s.Denied = append(s.Denied, c.denied[:]...)
	s.Reasons = reasonLabels
	s.ModeOf = reasonModes
	s.Tenants = int64(l.sync.Len())
	s.Degraded = l.sync.Degraded()
	// The tokens that came to the leases here: granted at once, and
	// reserved ones (WithReservation) and rate shares' (WithRateShares)
	// as they came due. Reserved tokens not due yet are neither held nor
	// spent: counted as granted, they read as spent (and those a drain
	// dropped before they came due, for ever).
	in := st.Granted - st.Reserved + st.Dripped
	s.TokensGranted = in
	// Every token taken back (expired, evicted, closed) is given back, and
	// counted as returned or forfeited.
	s.TokensSpent = max(in-st.Returned-st.Forfeited-c.held, 0)
}
