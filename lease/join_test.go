package lease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestNewInstanceJoinsTheSummary, on a redis-server of its own (its
// command counts are the test's): a new instance's first acquire of a
// tenant whose reported demands are all met, and stay met with its own,
// joins the registry summary without reading the other instances'
// entries (one HGETALL a call, the bucket's, where a recompute reads the
// registry too), keeps the summary's time and leaves the bucket's ol
// as it is (only a recompute can see that no earlier release's client
// is active). The summaries it writes are those v13, which recomputed,
// writes for the same calls, but for their time. A new instance whose
// demand passes the rate recomputes, and the shares follow the water
// level.
func TestNewInstanceJoinsTheSummary(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartServer(t)
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	prefix := redisserver.Prefix(t)
	const window = time.Hour // the summary stays fresh: an eighth of it
	lim := Limits{Rate: 1000, Burst: 1000}
	v13 := redis.NewScript(v12Common + v13Acquire) // v13's common.lua is v12's

	// summary returns the tenant's summary as its numbers and its time.
	summary := func(tenant string) (numbers, at string) {
		t.Helper()
		rg, err := rdb.HGet(ctx, Key(prefix, tenant), "rg").Result()
		if err != nil {
			t.Fatalf("%s: summary: %v", tenant, err)
		}
		at, numbers, _ = strings.Cut(rg, ":")
		return numbers, at
	}
	// join makes instance i's first acquire of tenant, with demand d, by
	// this release, and returns its grant.
	join := func(tenant string, i int, d float64) Grant {
		t.Helper()
		c, err := NewClient(rdb, prefix, WithInstance(fmt.Sprintf("i%d", i), window))
		if err != nil {
			t.Fatal(err)
		}
		g, err := acquireRequest(ctx, c, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: d})
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		return g
	}
	// old makes the same acquire by v13.
	old := func(tenant string, i int, d float64) {
		t.Helper()
		key := Key(prefix, tenant)
		if err := v13.Run(ctx, rdb, []string{key, InstancesKey(key), QuotaKey(key)},
			formatRate(lim.Rate), lim.Burst, 1, fmt.Sprintf("i%d", i), window.Milliseconds(), d).Err(); err != nil {
			t.Fatalf("v13, instance %d: %v", i, err)
		}
	}

	join("t", 0, 10) // no summary yet: a recompute makes the first
	old("old", 0, 10)
	first, at := summary("t")
	if first != "1:10:-1" {
		t.Fatalf("first summary %q, want 1:10:-1", first)
	}
	// The bucket's mark of an earlier release's client, as a recompute
	// that met one leaves it.
	if err := rdb.HSet(ctx, Key(prefix, "t"), "ol", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 16; i++ {
		g := join("t", i, 10)
		if g.Instances != i+1 || g.Share != 10 {
			t.Fatalf("instance %d joined with Instances %d, Share %v; want %d, 10", i, g.Instances, g.Share, i+1)
		}
		old("old", i, 10)
		got, gotAt := summary("t")
		want, _ := summary("old")
		if got != want || gotAt != at {
			t.Fatalf("after instance %d: summary %q at %s, want %q (v13's) at %s", i, got, gotAt, want, at)
		}
	}
	// 15 joins by this release read the bucket only; v13's 15 recomputes
	// read the bucket and the registry.
	if n := cmdCalls(t, rdb, "hgetall"); n != 15+30 {
		t.Fatalf("%d HGETALLs for 15 joins and 15 recomputes by v13, want 45", n)
	}
	if ol, err := rdb.HExists(ctx, Key(prefix, "t"), "ol").Result(); err != nil || !ol {
		t.Fatalf("ol after the joins: %v, %v; want it kept", ol, err)
	}

	// Demands past the rate: a recompute, whose water level caps the
	// newcomer (1000 - 16×10 left for it), and which, having met no
	// earlier release's entry, clears ol.
	g := join("t", 16, 900)
	if g.Instances != 17 || g.Share != 840 {
		t.Fatalf("instance 16 (demand 900): Instances %d, Share %v; want 17, 840", g.Instances, g.Share)
	}
	if got, gotAt := summary("t"); got != "17:1060:840" || gotAt == at {
		t.Fatalf("summary after demand 900: %q at %s, want 17:1060:840 recomputed after %s", got, gotAt, at)
	}
	if ol, err := rdb.HExists(ctx, Key(prefix, "t"), "ol").Result(); err != nil || ol {
		t.Fatalf("ol after a recompute that met no earlier release: %v, %v; want it gone", ol, err)
	}
}
