package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leasequota/leasequota/lease"
)

// TestKeysArePrintedWhole: where the text output gives a Redis key, to
// find the tenant's keys by (inspect's key line) or as the only name of
// a tenant whose name is not stored (quota list's "(unnamed)", top's
// "(hashed)"), it prints the whole key. The command cut keys at 64 bytes
// as it cuts long tenant names, and a hashed key (the prefix, "{h:" and
// 64 hex digits) always ran past that: its hash was cut in two, and no
// redis-cli command could be given the key from what was shown.
func TestKeysArePrintedWhole(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	long := strings.Repeat("L", 200) // hashed into its key
	mid := strings.Repeat("m", 100)  // percent-encoded, its key over 64 bytes
	if _, err := lc.Acquire(ctx, long, lease.Limits{Rate: 1, Burst: 100}, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.AdminSetOverride(ctx, long, lease.Override{Rate: 1, Burst: 100}); err != nil {
		t.Fatal(err)
	}
	// As a client of the release before names were stored left it.
	if err := rdb.HDel(ctx, lease.QuotaKey(lc.Key(long)), "n").Err(); err != nil {
		t.Fatal(err)
	}
	if out := c.mustRun("inspect", mid); !strings.Contains(out, lc.Key(mid)+"\n") {
		t.Errorf("inspect printed %q, want the key %q whole", out, lc.Key(mid))
	}
	out, _, code := c.run("quota", "list")
	if code != exitOK || !strings.Contains(out, lease.QuotaKey(lc.Key(long))) {
		t.Errorf("quota list: exit %d, printed %q; want 0 and the unnamed override's key %q whole", code, out, lease.QuotaKey(lc.Key(long)))
	}
	if out := c.mustRun("top", "-once", "-sample", "100000"); !strings.Contains(out, "(hashed) "+lc.Key(long)) {
		t.Errorf("top printed %q, want the hashed key %q whole", out, lc.Key(long))
	}
}
