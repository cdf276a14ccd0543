package syncer

import (
	"errors"
	"fmt"
	"time"
)

// ErrBusy marks a call that timed out while Redis was answering this
// syncer's other calls: one was answered at most a deadline before the
// call was sent, or since. Redis is up but busy (or this process read its
// replies late), which is congestion, not an outage.
//
// Why: a timeout used to count as an outage. On a saturated Redis, or in
// a process too busy to read the replies in time, some calls time out
// while others are answered; the breaker then opened and the tenants
// whose calls timed out decided by their failure mode, while Redis was
// up. FailOpen admitted past the bound, FailClosed denied as if Redis
// were gone. A busy call now leaves its tenant as it was: not failing,
// so when its lease is spent it is denied (ReasonExhausted) until a
// later call gets through, and the call budget (budget.go) still counts
// the timeout as congestion. A Redis that answered nothing for longer
// than a deadline before the call, and nothing since, is silent: that is
// an outage, as before. So a Redis that stops answering is taken for gone
// one timed-out call later than before (the first such call is busy).
//
// Only without Options.Cluster: there a reply from one node says nothing
// of another.
var ErrBusy = errors.New("syncer: Redis busy: the call timed out while Redis was answering other calls")

// noteReply records that a call was answered whole at now.
func (s *Syncer) noteReply(now time.Time) { raise(&s.lastReply, now.UnixNano()) }

// busy returns err marked with ErrBusy when it is a timeout of a call
// made at sent with deadline timeout, and a call was answered no earlier
// than timeout before sent: Redis is up.
func (s *Syncer) busy(err error, sent time.Time, timeout time.Duration) error {
	if s.opts.Cluster || !timedOut(err) || s.lastReply.Load() < sent.Add(-timeout).UnixNano() {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBusy, err)
}
