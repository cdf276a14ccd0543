package syncer

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/internal/schedwait"
)

// starvation watches this process's own scheduling delays, so that a
// silence of Redis is not counted while the process could not run its
// calls in time (redisNode.silent). It reads the Go runtime's
// distribution of goroutines' waits to run when a call times out (at most
// once a millisecond), and keeps the last time such a read found a wait
// of at least the call deadline since the read before (starvedAt).
//
// Why: a fleet of 32 limiters in one process, whose 64,000 pairs' first
// requests came at once on two cores, had limiters that got no call
// through for a second at the start while Redis ran at 10 to 30 % of a
// core: their calls waited for a connection or a dial, or for the CPU to
// read a reply, past their 50 ms deadline. Counted as Redis's silence,
// that put their tenants in the failure mode with Redis up (BenchmarkFleet
// 32x2000 with rate shares, -fleet.coldasync and -fleet.rotate: 2 runs
// of 4 at b2f47e1, 643 and 693 decisions, and 3 of 3 beside a busy
// loop; none since: docs/performance.md, "A process that could not run
// its calls"). The timeout's own lateness
// (redisNode.timedOutAt) does not show it: the timer fired on time, the
// call had not been able to complete.
//
// A process starved for good keeps its timeouts from counting as
// silence; the grace of redisNode.silent (lateGrace times downAfter
// without an answer in time) still ends it.
//
// The zero value reads nothing (starvedAt stays 0): driven mode, whose
// clock is the caller's, keeps it so.
type starvation struct {
	mu sync.Mutex // guards the fields below; a caller that finds it held skips the read
	// threshold is the wait to run that counts, in seconds: the call
	// deadline. Zero: nothing is read.
	threshold float64
	// sample is the runtime/metrics sample, its histogram reused.
	sample [1]metrics.Sample
	// prev is the counts of the read before, nil until the first.
	prev []uint64
	// readAt is when the last read was made (Options.Now, unix
	// nanoseconds).
	readAt int64

	// starvedAt is when a read last found a wait of threshold or more
	// since the read before (Options.Now, unix nanoseconds); 0 for never.
	starvedAt atomic.Int64
}

// init arms s with threshold and takes the first read, at now, which the
// next read's waits count from.
func (s *starvation) init(threshold time.Duration, now time.Time) {
	s.threshold = threshold.Seconds()
	s.sample[0].Name = schedwait.Metric
	s.read(now)
}

// observe reads the runtime's waits at now, unless another read is in
// progress or was made within the last millisecond, and records now as
// starvedAt when one of them lasted the threshold or more.
func (s *starvation) observe(now time.Time) {
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if s.threshold <= 0 || now.UnixNano()-s.readAt < int64(time.Millisecond) {
		return
	}
	s.read(now)
}

// read takes a read at now; s.mu is held (or s is being made).
func (s *starvation) read(now time.Time) {
	metrics.Read(s.sample[:])
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		s.threshold = 0 // not served by this runtime: read no more
		return
	}
	h := s.sample[0].Value.Float64Histogram()
	if s.prev != nil && schedwait.AtLeast(s.prev, h.Counts, h.Buckets, s.threshold) > 0 {
		s.starvedAt.Store(now.UnixNano())
	}
	s.prev = append(s.prev[:0], h.Counts...)
	s.readAt = now.UnixNano()
}
