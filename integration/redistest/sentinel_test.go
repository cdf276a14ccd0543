package redistest

import (
	"context"
	"testing"
	"time"
)

// TestSentinel starts a sentinel setup, writes through a failover client,
// kills the master and waits for the replica to be promoted.
func TestSentinel(t *testing.T) {
	began := time.Now()
	s := StartSentinel(t)
	t.Logf("sentinel setup up in %v", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.FailoverClient()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Let the write reach the replica before the kill.
	if err := c.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	old, err := s.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover from %s to %s in %v", old, now, time.Since(began).Round(time.Millisecond))
	// The failover client follows the sentinels to the new master.
	if err := poll(ctx, 20*time.Millisecond, "failover client", func(ctx context.Context) error {
		v, err := c.Get(ctx, "k").Result()
		if err == nil && v != "v" {
			t.Fatalf("k = %q after failover", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover client reads from the new master %v after the kill", time.Since(began).Round(time.Millisecond))
}
