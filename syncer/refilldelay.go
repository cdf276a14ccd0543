package syncer

import (
	"math"
	"sync/atomic"
	"time"
)

// refillDelayFresh is how long the delay of the last urgent refill speaks
// for the next one. Past it, a waiting request asks again (and measures
// again): a delay learned while Redis was busy must not keep cold
// requests from waiting once it is not.
const refillDelayFresh = time.Second

// refillDelay is how long the syncer's last urgent refill took, from its
// plan to the reply (its wait for a free call included), and when it
// ended.
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
}

// note records an urgent refill that began at began and ended at ended.
func (d *refillDelay) note(began, ended time.Time) {
	d.took.Store(int64(max(ended.Sub(began), 0)))
	d.at.Store(ended.UnixNano())
}

// failed records an urgent refill that ended at ended without a lease:
// its call failed, or found no room in the call budget. It outlasts any
// wait: while it is fresh, no cold request waits for the next one.
func (d *refillDelay) failed(ended time.Time) {
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

// RefillOutlasts reports whether an urgent refill asked for at now would
// likely take longer than wait: the last one did, or brought no lease
// (its call failed, or Redis was too busy to take it), and ended within a
// second. A request whose wait is shorter than that need not wait (see
// refillDelay).
func (s *Syncer) RefillOutlasts(wait time.Duration, now time.Time) bool {
	took, ok := s.refillDelay.last(now)
	return ok && took >= wait
}
