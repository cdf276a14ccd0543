package integration

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/integration/redistest"
)

// leakCheck checks for leaked goroutines after the test's cleanups (which
// close its limiters and clients, and stop the servers it started after
// this call) have run, with verifyNoLeaks.
func leakCheck(t *testing.T) {
	redistest.Shared(t) // the harness lives for the package
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { verifyNoLeaks(t, ignore) })
}

// redialWait is how long verifyNoLeaks lets goroutines end before it
// looks: go-redis's redial loop sleeps a second between failed dials,
// and a dial to a silent address lasts up to the client's DialTimeout
// (5 s by default).
const redialWait = 10 * time.Second

// verifyNoLeaks is goleak.VerifyNone for a test whose Redis went away
// while its clients were open (killed, paused, blackholed, failed over).
// After a failed dial, go-redis redials in a goroutine of its own
// (pool.(*ConnPool).tryDial) that sees its client closed only when it
// next wakes, up to a second later, or a dial later: so the goroutines
// are polled until none is left beyond opts, for up to redialWait, and
// then must be gone, go-redis's included. (TestRedisKilledUnderLoad once
// found tryDial still asleep when goleak's own retries ended, beside two
// busy loops.)
func verifyNoLeaks(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(redialWait)
	for goleak.Find(opts...) != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // a poll of the condition, with a deadline
	}
	goleak.VerifyNone(t, opts...)
}
