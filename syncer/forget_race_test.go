package syncer_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/syncer"
)

// TestForgetNodesRaceKeepsOneNodePerMaster: two calls that look up one
// master at once, after it went unused for longer than the syncer keeps a
// master's redisNode, get the same node, the one kept for the calls after
// them. forgetNodes checked a node stale and deleted it while a lookup
// that had loaded it just before went on to use it: two redisNodes for one
// master at once, each with its own semaphore and window (twice the
// per-master limit of calls in flight), and the calls on the forgotten one
// cut a window, or found an outage, that no later call saw.
func TestForgetNodesRaceKeepsOneNodePerMaster(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	s := syncer.New(view, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		Cluster:     true,
		IdleTimeout: time.Second,
	})
	defer s.Close()
	const rounds = 50000
	split := 0
	for range rounds {
		clock.Add(time.Hour) // every node stale, forgetting due
		var got [2]any
		var wg, ready sync.WaitGroup
		start := make(chan struct{})
		ready.Add(len(got))
		for i := range got {
			wg.Go(func() {
				ready.Done()
				<-start
				got[i] = s.NodeNamed("a:6379")
			})
		}
		ready.Wait()
		close(start)
		wg.Wait()
		if got[0] != got[1] || !s.NodeKept("a:6379", got[0]) {
			split++
		}
	}
	t.Logf("%d of %d pairs of concurrent lookups of one master used two redisNodes, or one no longer kept", split, rounds)
	if split > 0 {
		t.Errorf("%d of %d pairs of concurrent lookups of one master used two redisNodes, or one no longer kept; want 0", split, rounds)
	}
}
