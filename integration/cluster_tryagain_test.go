package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/internal/keyslot"
	"github.com/leasequota/leasequota/lease"
)

// TestClusterTryAgainRunsEachAcquireOnce: a pipeline whose first
// acquire gets TRYAGAIN (its slot is migrating and only some of its keys
// are still on the source) runs the other acquires of the pipeline once.
//
// go-redis's ClusterClient, when the first command of a node's batch gets
// a reply it retries (TRYAGAIN among them), sends the whole batch again,
// commands that ran included, on each of its redirects: acquires that
// were granted ran again, and their buckets lost those tokens, with no
// reply to say so (TestClusterReshard's "UNEXPLAINED" losses). When a
// command of the batch had been redirected (MOVED, ASK) before, it is
// then in two nodes' batches at once, which the race detector reports.
// lease puts a single-key read first in each pipeline on a cluster,
// which never gets TRYAGAIN.
func TestClusterTryAgainRunsEachAcquireOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	prefix := redistest.Prefix(t)
	lc, err := lease.NewClient(rdb, prefix, lease.WithInstance("a", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil || len(masters) < 2 {
		t.Fatalf("masters: %v, %v", masters, err)
	}
	source, target := masters[0], masters[1]
	// Two tenants on source, in different slots: a, whose slot will
	// migrate, first in the pipeline, and b.
	var a, b string
	for i := 0; b == ""; i++ {
		name := "t" + strconv.Itoa(i)
		slot := int(keyslot.Of(lc.Key(name)))
		switch {
		case !source.Owns(slot):
		case a == "":
			a = name
		case slot != int(keyslot.Of(lc.Key(a))):
			b = name
		}
	}
	lim := lease.Limits{Rate: 1e-9, Burst: 100} // refills nothing during the test
	// a's bucket and registry exist, its override does not: during the
	// migration its acquire gets TRYAGAIN (a script of several keys, some
	// of them not on the source).
	if g, err := lc.Acquire(ctx, a, lim, 1); err != nil || g.Granted != 1 {
		t.Fatalf("acquire of %s: %+v, %v", a, g, err)
	}
	slot := int(keyslot.Of(lc.Key(a)))
	src, dst := cl.NodeClient(source.Addr), cl.NodeClient(target.Addr)
	setSlot := func(c *redis.Client, args ...interface{}) {
		t.Helper()
		if err := c.Do(ctx, append([]interface{}{"cluster", "setslot", slot}, args...)...).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %v: %v", slot, args, err)
		}
	}
	setSlot(dst, "importing", source.ID)
	setSlot(src, "migrating", target.ID)
	defer func() {
		// Back to the source, which kept every key.
		for _, c := range []*redis.Client{src, dst} {
			_ = c.Do(context.Background(), "cluster", "setslot", slot, "node", source.ID).Err()
		}
	}()

	res, err := lc.AcquireMany(ctx, []lease.Request{
		{Tenant: a, Limits: lim, Want: 10},
		{Tenant: b, Limits: lim, Want: 10},
	}, nil)
	if err != nil {
		t.Fatalf("AcquireMany: %v", err)
	}
	if res[1].Err != nil || res[1].Grant.Granted != 10 {
		t.Fatalf("acquire of %s beside a migrating slot: %+v", b, res[1])
	}
	t.Logf("acquire of %s on the migrating slot: %v", a, res[0].Err)
	tk, err := src.HGet(ctx, lc.Key(b), "tk").Float64()
	if err != nil {
		t.Fatal(err)
	}
	if tk < 89.999 {
		t.Errorf("%s's bucket holds %v after one acquire of 10 from 100: the acquire ran %.0f times", b, tk, (100-tk)/10)
	}
}
