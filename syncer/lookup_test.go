package syncer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// unloadedCluster is a cluster whose slot map never loads (unreachable):
// each NodeOf waits for its ctx's deadline, as go-redis's ClusterClient
// reloading its slot map does, or, without a deadline, for the client's
// own dial timeout (here 1 s); each call times out at its deadline.
type unloadedCluster struct {
	lease.Store
	unbounded atomic.Int32 // look-ups without a deadline
}

func (c *unloadedCluster) NodeOf(ctx context.Context, tenant string) (string, bool) {
	if _, ok := ctx.Deadline(); !ok {
		c.unbounded.Add(1)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		return "", false
	}
	<-ctx.Done()
	return "", false
}

func (c *unloadedCluster) AcquireMany(ctx context.Context, reqs []lease.Request, _ []lease.Result) ([]lease.Result, error) {
	<-ctx.Done()
	res := make([]lease.Result, len(reqs))
	for i := range res {
		res[i].Err = ctx.Err()
	}
	return res, ctx.Err()
}

// TestNodeLookupsHaveTheCallDeadline: on a Redis Cluster whose slot map
// cannot load, every look-up of a tenant's node is bounded by the call
// deadline. The one that tells whether a timed-out tenant's node is busy
// had none: each timed-out tenant of a round waited for the client's dial
// timeout in turn (a second each here, go-redis's 5 s by default), its
// lock held, and Close waited for all of them.
func TestNodeLookupsHaveTheCallDeadline(t *testing.T) {
	clock, view := clockedView(t)
	st := &unloadedCluster{Store: view}
	s := syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		Cluster:     true,
		CallTimeout: 20 * time.Millisecond,
	})
	defer s.Close()
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	for _, n := range []string{"a", "b", "c"} {
		track(n).NoteMiss(10)
	}
	s.Tick(context.Background())
	s.Wait()
	<-s.Refill(context.Background(), track("d"), 1)
	if n := st.unbounded.Load(); n > 0 {
		t.Errorf("%d look-ups of a tenant's node without a deadline, want none", n)
	}
}
