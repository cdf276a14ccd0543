package leasequota

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestClusterSparseTenantAfterFailoverLeasesAgain is
// TestClusterSparseTenantAfterOutageLeasesAgain with the master replaced
// rather than back: a sparse tenant whose lease call failed while its
// master answered nothing, and whose slots a replica then took over under
// its own address (a Redis Cluster failover: the old master never answers
// again), is decided by a lease from the new master, not by its failure
// mode, and the limiter is not Degraded once the new master answers.
func TestClusterSparseTenantAfterFailoverLeasesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		var failedOver atomic.Bool
		store.SetNodes(func(_ context.Context, tenant string) (string, bool) {
			if !strings.HasPrefix(tenant, "moved-") {
				return "other:6379", true
			}
			if failedOver.Load() {
				return "replica:6379", true
			}
			return "master:6379", true
		})
		// While the old master is dead its tenants' calls hang; once
		// failed over they go to the replica, which answers.
		dead := func(ctx context.Context, c faultstore.Call) error {
			if failedOver.Load() || (c.Op != faultstore.OpAcquire && c.Op != faultstore.OpRelease) {
				return nil
			}
			for _, tenant := range c.Tenants {
				if strings.HasPrefix(tenant, "moved-") {
					<-ctx.Done()
					return ctx.Err()
				}
			}
			return nil
		}
		// A busy tenant on the same master keeps it called, before the
		// failover the old master, after it the replica.
		l, stop := clusterSparseRig(t, store, "moved-")
		defer l.Close(context.Background())
		ctx := context.Background()
		gap := 3 * DefaultLeaseTTL
		store.SetHook(dead)
		time.Sleep(2 * time.Second) // the master silent for more than the outage window
		if d := l.AllowN(ctx, "moved-sparse", 1); d.Mode != FailClosed {
			t.Fatalf("request with its master dead: %v, mode %v; want decided by its mode", d.Reason, d.Mode)
		}
		time.Sleep(gap)
		failedOver.Store(true)
		time.Sleep(gap)
		degraded := l.Degraded()
		d := l.AllowN(ctx, "moved-sparse", 1)
		stop()
		if degraded {
			t.Errorf("Degraded %v after the failover, the new master answering every call since", gap)
		}
		if !d.Allowed || d.Mode != FailDefault {
			t.Errorf("request %v after the failover: allowed %v, %v, mode %v; want admitted from a lease", gap, d.Allowed, d.Reason, d.Mode)
		}
	})
}
