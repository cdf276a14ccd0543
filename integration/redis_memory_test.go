package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// TestRedisMemoryPerBucket measures what one tenant's keys cost Redis
// (MEMORY USAGE with SAMPLES 0: exact for these small hashes, key names
// included; the test's key prefix is 25 bytes, the tenant names 4) and
// holds the figures to what docs/performance.md states:
//
//   - full: a bucket that every call finds refilled to full (a tenant
//     within its quota), so that its level history is one entry, leased
//     by 4 instances: the bucket, and the instance registry;
//   - busy: a bucket that no call finds full (Rate 100 drained by calls
//     a fraction of a millisecond apart), so that each call adds a history
//     entry, up to the 8 kept;
//   - worst: busy, with 32 instances in the registry, an override and the
//     set of applied release ids.
//
// The shapes come from the rates: no sleeps.
func TestRedisMemoryPerBucket(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)

	clients := func(n int) []*lease.Client {
		cs := make([]*lease.Client, n)
		for i := range cs {
			c, err := lease.NewClient(rdb, prefix, lease.WithInstance(fmt.Sprintf("pod-%02d", i), 2100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			cs[i] = c
		}
		return cs
	}
	usage := func(key string) int64 {
		n, err := rdb.Do(ctx, "MEMORY", "USAGE", key, "SAMPLES", "0").Int64()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		return n
	}
	type cost struct{ bucket, registry, override, releases int64 }
	measure := func(tenant string) cost {
		k := lease.Key(prefix, tenant)
		return cost{usage(k), usage(lease.InstancesKey(k)), usage(lease.QuotaKey(k)), usage(lease.ReleasesKey(k))}
	}
	total := func(c cost) int64 { return c.bucket + c.registry + c.override + c.releases }
	// historyLen is the number of entries of the level history (field h)
	// and its length in bytes.
	historyLen := func(tenant string) (int, int) {
		h, _, _, packed := bucketHistory(t, rdb, lease.Key(prefix, tenant))
		return h.Len(), len(packed)
	}
	acquire := func(tenant string, cs []*lease.Client, calls int, lim lease.Limits, want int64) {
		for i := range calls {
			if _, err := cs[i%len(cs)].Acquire(ctx, tenant, lim, want); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Refilled to full between calls: 5 tokens come back in 5 µs.
	four := clients(4)
	acquire("full", four, 12, lease.Limits{Rate: 1e6, Burst: 100}, 5)
	// Each call finds the bucket lower than the last did.
	busy := lease.Limits{Rate: 100, Burst: 1000}
	acquire("busy", four, 12, busy, 20)
	// The override and a release first: each restarts the history.
	many := clients(32)
	acquire("wrst", many, 1, busy, 10)
	if _, err := many[0].SetOverride(ctx, "wrst", busy, lease.Override{Rate: 100, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := many[0].Release(ctx, "wrst", busy, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	acquire("wrst", many, 64, busy, 10)

	for _, c := range []struct {
		name, tenant string
		entries      int // history entries the shape makes
		bucket, max  int64
	}{
		{"full (4 instances)", "full", 1, 200, 400},
		{"busy (4 instances)", "busy", 8, 200, 450},
		{"worst (32 instances, override, release ids)", "wrst", 8, 232, 1700},
	} {
		m := measure(c.tenant)
		n, size := historyLen(c.tenant)
		t.Logf("%s: %d B in all: bucket %d B (%d history entries in %d B), registry %d B, override %d B, release ids %d B",
			c.name, total(m), m.bucket, n, size, m.registry, m.override, m.releases)
		if n != c.entries {
			t.Errorf("%s: %d history entries, want %d: the shape is not the one measured", c.name, n, c.entries)
		}
		if m.bucket > c.bucket || total(m) > c.max {
			t.Errorf("%s: bucket %d B, %d B in all; want at most %d B and %d B (docs/performance.md)", c.name, m.bucket, total(m), c.bucket, c.max)
		}
	}
}
