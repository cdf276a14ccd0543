package syncer

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// refillDelayFresh is how long the delay of the last urgent refill speaks
// for the next one. Past it, a waiting request asks again (and measures
// again): a delay learned while Redis was busy must not keep cold
// requests from waiting once it is not.
const refillDelayFresh = time.Second

// refillDelay is how long the last urgent refill on a Redis node took (a
// redisNode's), from its plan to the reply (its wait for a free call
// included), and when it ended.
//
// Why: on a saturated Redis, or in a process too busy to read replies in
// time, an urgent refill takes longer than a cold tenant's request may
// wait (WithColdStartWait), or times out, or finds no room in the call
// budget. Every such request would then wait its whole
// budget and be denied anyway; a load of many new tenants spends its time
// in those waits. Knowing the last refill's delay, a cold request that
// could not be served in time is denied at once instead (its tenant still
// goes in the next round).
//
// Written by the goroutine of each urgent refill, read by requests; the
// two words are separate atomics, and a reader that sees one of them
// from another refill sees a delay that was current within a round trip.
type refillDelay struct {
	took atomic.Int64 // nanoseconds the last urgent refill took
	at   atomic.Int64 // when it ended, unix nanoseconds; 0: none yet
	// down says the last urgent refill's call failed as an outage: its
	// tenant was failing after it (not a busy Redis, nor no room). It is
	// not redisNode.down, which nodeHealth sets on any failed call while
	// the master has answered nothing within the outage window: true of
	// every master at a run's start, and kept until a call answers. Read
	// by cold requests in its place (d5dd68e), it decided tenants whose
	// own calls never failed by their failure mode (integration's
	// TestClusterGlobalBound: FailClosed tenants denied unavailable).
	// This flag is set only by a refill whose tenant failed, and cleared
	// by the next refill of the node.
	down atomic.Bool
}

// note records an urgent refill that began at began and ended at ended.
func (d *refillDelay) note(began, ended time.Time) {
	d.down.Store(false)
	d.took.Store(int64(max(ended.Sub(began), 0)))
	d.at.Store(ended.UnixNano())
}

// failed records an urgent refill that ended at ended without a lease:
// its call failed (down: as an outage, its tenant failing), or found no
// room in the call budget. It outlasts any wait: while it is fresh, no
// cold request waits for the next one.
func (d *refillDelay) failed(ended time.Time, down bool) {
	d.down.Store(down)
	d.took.Store(math.MaxInt64)
	d.at.Store(ended.UnixNano())
}

// last returns the last urgent refill's delay, and false when none ended
// within refillDelayFresh before now.
func (d *refillDelay) last(now time.Time) (time.Duration, bool) {
	at := d.at.Load()
	if at == 0 || now.UnixNano()-at > int64(refillDelayFresh) {
		return 0, false
	}
	return time.Duration(d.took.Load()), true
}

// RefillOutlasts reports whether an urgent refill for tenant asked for at
// now would likely take longer than wait: the last one on the tenant's
// Redis node did, or brought no lease (its call failed, or the node was
// too busy to take it), and ended within a second. A request whose wait
// is shorter than that need not wait (see refillDelay).
//
// In Cluster mode the delay is the node's (NodeOf, looked up within
// wait at most): a dead or slow master says nothing of the others. One
// delay for the whole syncer, a refill that timed out on a dead master
// had every new tenant of every live one denied at once (cold_start)
// for a second (TestClusterDeadNodeRefillKeepsLiveColdWait in the root
// package).
//
// down reports, in Cluster mode, that the node's last refill failed as an
// outage: the node is down for the tenant as the breaker says Down on
// one server (which is always false in Cluster mode), and the tenant's
// failure mode decides its request, not a cold start's denial
// (TestClusterDeadNodeNewTenantByItsMode in the root package).
func (s *Syncer) RefillOutlasts(tenant string, wait time.Duration, now time.Time) (outlasts, down bool) {
	node := &s.one
	if s.opts.Cluster {
		ctx, cancel := context.WithTimeout(context.Background(), max(min(wait, s.opts.CallTimeout), 0))
		name, _ := s.nodeOf(ctx, tenant)
		cancel()
		node = s.node(name)
	}
	took, ok := node.refillDelay.last(now)
	return ok && took >= wait, ok && s.opts.Cluster && node.refillDelay.down.Load()
}
