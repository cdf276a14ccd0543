package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leasequota/leasequota/lease"
)

// TestInspectKeyExpiryPastDuration: a drained bucket of 10 tokens at
// 1e-9 a second is kept 1e13 ms (about 317 years), longer than a
// time.Duration holds. inspect printed "key expiry none" for it (the TTL
// wrapped negative), then, with the TTL saturated, a TTL of
// 2562047h47m16.854775807s as if exact; it says "more than" that. (Its
// level is unknown: the TTL does not tell the rate.)
func TestInspectKeyExpiryPastDuration(t *testing.T) {
	c, _, lc := newCLI(t)
	res, err := lc.AcquireMany(context.Background(), []lease.Request{{Tenant: "lifetime", Limits: lease.Limits{Rate: 1e-9, Burst: 10}, Want: 10}}, nil)
	if err == nil {
		err = res[0].Err
	}
	if err != nil || res[0].Grant.Granted != 10 {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	out := c.mustRun("inspect", "lifetime")
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "key expiry") {
			line = l
		}
	}
	if !strings.Contains(line, "in more than 2562047h") {
		t.Errorf("inspect printed %q, want a key expiry in more than 2562047h (292 years):\n%s", line, out)
	}
	if !strings.Contains(out, "unknown: no override, and the key's TTL does not tell the rate") {
		t.Errorf("inspect printed no unknown level:\n%s", out)
	}
}
