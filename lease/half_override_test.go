package lease

import (
	"context"
	"testing"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestHalfOverrideIsNone: an override hash without both r and b (one of
// them deleted by hand) is no override for every script (read_override,
// quota.lua's get): acquires apply the quota passed. ListOverrides and
// Inspect read it the same way, where they reported it as a bad reply.
func TestHalfOverrideIsNone(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	c, err := NewClient(rdb, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 1, Burst: 10}
	for _, fields := range [][]string{{"b", "100", "n", "b-only"}, {"r", "5", "n", "r-only"}, {"b", "100", "min", "3"}} {
		tenant := fields[len(fields)-1]
		if err := rdb.HSet(ctx, QuotaKey(c.Key(tenant)), fields).Err(); err != nil {
			t.Fatal(err)
		}
		if o, err := c.GetOverride(ctx, tenant); err != nil || o != nil {
			t.Errorf("%v: GetOverride %+v, %v; want none", fields, o, err)
		}
		if g, err := c.Acquire(ctx, tenant, lim, 100); err != nil || g.Granted != 10 || g.Override != nil {
			t.Errorf("%v: Acquire %+v, %v; want the quota passed, 10 granted", fields, g, err)
		}
		if in, err := c.Inspect(ctx, tenant); err != nil || in.Override != nil {
			t.Errorf("%v: Inspect %+v, %v; want no override", fields, in, err)
		}
	}
	for lo, err := range c.ListOverrides(ctx) {
		t.Errorf("ListOverrides yielded %+v, %v; want nothing", lo, err)
	}
}
