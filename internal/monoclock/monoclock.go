// Package monoclock is the clock of a Limiter and of a Syncer by
// default: a wall time read once, plus Go's monotonic time since.
package monoclock

import "time"

// New returns a clock that reads wall at first and from then on wall
// plus the time since New by Go's monotonic clock. It never steps when
// the system's wall clock does (NTP, an operator's date -s): the syncer
// keeps its times as unix nanoseconds (time.Time.UnixNano, which drops
// the monotonic reading), and a wall clock stepped back by d kept leases
// d longer than their LeaseTTL, past the window bound, held tenants that
// waited on a dry bucket d longer, and moved rate shares and
// reservations d late, while a step forward made their tokens come due
// before Redis made them (docs/failure-modes.md, "Clock jumps").
//
// Its times are the wall clock's as of New; after a step of the system's
// wall clock they differ from time.Now by the step. None of them is
// compared with another machine's: what Redis reports is mapped in by
// differences (rateshare.LocalWindow) and what goes to Redis are
// durations (a release's Age). The monotonic clock stops while the
// machine sleeps (suspend), as it does for a paused VM on most
// hypervisors: see docs/failure-modes.md.
//
// A time it returns carries wall's monotonic reading, moved on as well,
// so that time.Time.Sub and deadlines made from it use the monotonic
// clock. It costs one monotonic clock read, less than time.Now's two.
func New(wall time.Time) func() time.Time {
	origin := time.Now()
	return func() time.Time { return wall.Add(time.Since(origin)) }
}
