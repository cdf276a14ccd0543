package syncer

import (
	"math"
	"sync"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// maxClockDrift bounds how fast a Redis server's clock and the limiter's
// may run apart, in seconds a second: twice the 500 ppm at which NTP
// slews a clock at most.
const maxClockDrift = 1e-3

// serverClock dates grants on one Redis server's clock in the limiter's
// (Options.Now): the local time at which Redis ran the call that made
// them, never later than it ran, as far as an upper bound on how far the
// server's clock is ahead of the limiter's goes.
//
// Why: a batch of leased tokens lives LeaseTTL from its stamp, which must
// be no later than Redis debited the tokens (Ledger; the window bound's
// L). Stamped at the call's plan, a batch lost to its life the time the
// call then waited: for a room in the call budget, in the pipeline, and
// above all in a saturated Redis's queue, where calls wait for the
// other instances' calls before they run. On such a Redis the late
// replies' tokens expired unspent (docs/performance.md, "Rate shares at
// 32 × 2,000, and their period").
//
// The bound: a call planned at local time p and answered at a ran at a
// local time d in [p, a], and its reply gives the server's time r of the
// run, so the offset r − d lies in [r − a, r − p]. Each call gives an
// upper bound r − p. The least seen, grown by maxClockDrift for each
// second from its call to the reply being dated (so that it stays a
// bound while the clocks' rates differ by no more), is ahead; a run at r is dated r − ahead,
// which is then no later than d, clamped into [p, a]. A quiet moment's
// call (answered at once) makes ahead tight, and a queued call's run is
// dated within that call's slack of when it ran.
//
// What can break the bound is the server's clock stepping forward (or a
// failover to a master whose clock is ahead, or a redirect to one):
// ahead is then too small by the step. A call whose lower bound r − a
// exceeds ahead shows it, and ahead starts again from that call's own
// upper bound; a step too small to show dates the batches of the calls
// around it later than they ran by at most the step, and never past the
// reply's arrival (docs/failure-modes.md, "Clock jumps").
//
// The zero value knows nothing and dates each grant at its call's plan.
// Its methods are safe for concurrent use: the loop's rounds and the
// refills of tenants on the node date their grants at once.
type serverClock struct {
	mu sync.Mutex // guards the fields below
	// ahead is the least upper bound on the server's clock less the
	// limiter's (nanoseconds) that a call gave, as of that call's plan,
	// at (unix nanoseconds); known once a call has given one.
	ahead, at int64
	known     bool
}

// debited returns the local time (unix nanoseconds) to stamp the tokens
// of g with, g being the grant of a call planned at planned and answered
// at arrived: when Redis ran the call as far as the clocks' bound tells,
// within [planned, arrived]. A grant without a server time is dated at
// its plan.
func (c *serverClock) debited(planned, arrived int64, g lease.Grant) int64 {
	if g.ServerTime.IsZero() || arrived < planned {
		return planned
	}
	us := g.ServerTime.UnixMicro() - g.Wait.Microseconds() // Redis TIME of the run
	if us <= 0 || us >= maxServerMicros {
		return planned
	}
	// TIME reads whole microseconds, rounded down: the run was within the
	// microsecond after ran.
	ran := us * int64(time.Microsecond)
	hi, lo := ran+int64(time.Microsecond)-planned, ran-arrived
	c.mu.Lock()
	ahead := hi
	// The bound kept, grown for the drift up to the run (at arrived at the
	// latest), holds unless this call's lower bound passes it.
	if aged := c.ahead + int64(math.Ceil(float64(max(arrived-c.at, 0))*maxClockDrift)); c.known && aged < hi && lo <= aged {
		ahead = aged
	} else {
		c.ahead, c.at, c.known = hi, planned, true
	}
	c.mu.Unlock()
	return min(max(ran-ahead, planned), arrived)
}

// maxServerMicros bounds the server times debited reads, in microseconds
// since 1970: 2^62 ns, in the year 2116, so that they convert to
// nanoseconds and subtract without overflow.
const maxServerMicros = int64(1<<62) / int64(time.Microsecond)
