package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestAcquireBesideAnACLWithoutPTTL, on a redis-server of its own: an ACL
// written for the commands of the previous release's scripts (v10) lacks
// PTTL, which acquire.lua calls since 4b29f4b to extend the registry's TTL
// only. That call comes after the script wrote the bucket and the
// caller's registry entry, and a script is not rolled back: refused by
// the ACL, it failed the acquire after debiting the bucket, so the tokens
// were lost, at every call that renews the registry (a new instance's
// first, then a recompute every eighth of a window). The acquire
// succeeds instead, and the registry is kept as v10 keeps it (its TTL set
// whatever it was).
func TestAcquireBesideAnACLWithoutPTTL(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartServer(t)
	admin := srv.Client()
	defer admin.Close()
	const user, pass = "limiter", "limiter-pass"
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+pass, "~*", "+@all", "-pttl").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pass})
	defer rdb.Close()
	prefix := redisserver.Prefix(t)
	c, err := NewClient(rdb, prefix, WithInstance("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 1, Burst: 10}
	for _, tenant := range []string{"single", "batch"} {
		var g Grant
		if tenant == "single" {
			g, err = c.Acquire(ctx, tenant, lim, 4)
		} else {
			// The batch form: the failure was this tenant's alone, after
			// its writes all the same.
			var res []Result
			res, err = c.AcquireMany(ctx, []Request{{Tenant: tenant, Limits: lim, Want: 4}, {Tenant: "other", Limits: lim, Want: 1}}, nil)
			if err == nil {
				g, err = res[0].Grant, res[0].Err
			}
		}
		key := c.Key(tenant)
		tk, _ := admin.HGet(ctx, key, "tk").Result()
		left, _ := strconv.ParseFloat(tk, 64)
		if err != nil || g.Granted != 4 {
			t.Errorf("%s: acquire of 4 under an ACL without PTTL: %+v, %v; the bucket holds %s of 10 tokens (%.0f taken for that reply)", tenant, g, err, tk, 10-left)
			continue
		}
		if ms := admin.PTTL(ctx, InstancesKey(key)).Val(); ms <= 0 {
			t.Errorf("%s: the registry's TTL is %v, want it set (two windows)", tenant, ms)
		}
	}
}
