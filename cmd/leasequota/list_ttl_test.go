package main

import (
	"strings"
	"testing"
)

// TestQuotaListShowsTheStoredLeaseTTL: quota list's LEASE TTL column is
// the lease TTL as stored, as quota get prints it. It was rounded to a
// millisecond: 1.5ms listed as 2ms, and 400µs as 0s, which reads as
// none beside "default" (a TTL of 0).
func TestQuotaListShowsTheStoredLeaseTTL(t *testing.T) {
	c, _, _ := newCLI(t)
	for tenant, ttl := range map[string]string{"micro": "400µs", "milli": "1.5ms"} {
		c.mustRun("quota", "set", "-rate", "1", "-burst", "10", "-lease-ttl", ttl, tenant)
		if out := c.mustRun("quota", "get", tenant); !strings.Contains(out, "lease TTL "+ttl) {
			t.Fatalf("quota get %s printed %q, want lease TTL %s", tenant, out, ttl)
		}
	}
	out := c.mustRun("quota", "list")
	for tenant, ttl := range map[string]string{"micro": "400µs", "milli": "1.5ms"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 7 && f[0] == tenant {
				found = true
				if f[5] != ttl {
					t.Errorf("quota list shows %s's lease TTL as %s, want %s as stored", tenant, f[5], ttl)
				}
			}
		}
		if !found {
			t.Errorf("quota list lacks %s:\n%s", tenant, out)
		}
	}
}
