package leasequota

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/syncer"
)

// TestEvictionIsOneStep is the deterministic form of a crash: a request
// that found its tenant's entry evicted looked the tenant up again, got
// the same evicted entry back (the syncer marked entries evicted during a
// round but removed them from the registry only after it), and recursed
// until the stack overflowed. Here the run loop is stopped and the test
// drives a round itself, whose tenant iterator makes requests for the idle
// tenant V between the steps of the round; then it checks that the
// registry never holds an evicted entry, and that no decision took more
// than a few turns without waiting. The limiter's clock is the test's:
// the idle timeout passes when the test moves it, not while it sleeps.
func TestEvictionIsOneStep(t *testing.T) {
	clock := &manualClock{now: time.Now()}
	l, err := NewWithStore(memstore.New(), WithIdleTimeout(time.Millisecond),
		WithRedisTimeout(10*time.Second), // no call may time out on a loaded machine
		WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		withManualClock(clock.Now), WithColdStartWait(0), WithDefaultQuota(Quota{Rate: 100, Burst: 100}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	// Stop the run loop: this test runs the rounds.
	l.stop()
	l.group.Wait()
	ctx := context.Background()
	l.AllowN(ctx, "V", 1) // V is tracked (its lease comes with an urgent call or not at all)
	first := l.sync.Tenant("V")
	if first == nil {
		t.Fatal("V not tracked after its first request")
	}
	// A round sees the request and leases V; then V stays idle for longer
	// than the idle timeout.
	l.sync.Round(ctx, l.sync.Tenants())
	if first.Held() == 0 {
		t.Fatalf("V holds no lease after a round: %+v", l.sync.Stats())
	}
	clock.Advance(5 * time.Millisecond) // past the idle timeout
	var during []Decision
	l.sync.Round(ctx, func(yield func(*syncer.Tenant) bool) {
		for tn := range l.sync.Tenants() {
			if !yield(tn) {
				return
			}
			if tn.Name() == "V" {
				during = append(during, l.AllowN(ctx, "V", 1))
				if e := l.sync.Tenant("V"); e != nil && e.Evicted() {
					t.Error("the registry handed out an evicted entry during the round")
				}
			}
		}
	})
	if !first.Evicted() {
		t.Fatalf("V was not evicted by the round (stats %+v)", l.sync.Stats())
	}
	if e := l.sync.Tenant("V"); e == first {
		t.Fatal("the registry still holds V's evicted entry after the round")
	}
	after := l.AllowN(ctx, "V", 1)
	now := l.sync.Tenant("V")
	if now == nil || now == first || now.Evicted() {
		t.Fatalf("after eviction, V's entry is %p (evicted %v), want a new live entry", now, now != nil && now.Evicted())
	}
	if n := l.turns.max.Load(); n > 3 {
		t.Errorf("a decision took %d turns without waiting, want at most 3", n)
	}
	t.Logf("during the round: %v; after: %v", during, after)
}

// withManualClock makes the limiter read now instead of time.Now.
func withManualClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// manualClock is a clock that moves only when told to.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testWriter writes a test's library logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
