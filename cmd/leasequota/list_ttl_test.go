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

// TestQuotaListShowsDefaultLeaseSizes: quota list shows a MIN LEASE or
// MAX LEASE of 0 (each service's default: 1, and half the burst) as
// "default", as it shows a LEASE TTL of 0, and as quota get leaves them
// out. It printed 0: "MAX LEASE 0" for a quota whose leases go up to
// half its burst.
func TestQuotaListShowsDefaultLeaseSizes(t *testing.T) {
	c, _, _ := newCLI(t)
	c.mustRun("quota", "set", "-rate", "1", "-burst", "10", "dflt")
	c.mustRun("quota", "set", "-rate", "1", "-burst", "10", "-min-lease", "2", "-max-lease", "4", "set")
	want := map[string][2]string{"dflt": {"default", "default"}, "set": {"2", "4"}}
	out := c.mustRun("quota", "list")
	found := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 7 {
			continue
		}
		if w, ok := want[f[0]]; ok {
			found++
			if f[3] != w[0] || f[4] != w[1] {
				t.Errorf("quota list shows %s's MIN LEASE %s and MAX LEASE %s, want %s and %s", f[0], f[3], f[4], w[0], w[1])
			}
		}
	}
	if found != len(want) {
		t.Errorf("quota list lacks a tenant:\n%s", out)
	}
}
