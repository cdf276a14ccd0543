package main

import (
	"strings"
	"testing"
)

// TestQuotaSetFlagsAfterTheTenant: flags given after the tenant are not
// parsed (the flag package stops at the first argument), and quota set
// says so, as get, delete and inspect do. It said "-rate is required" (or
// "-burst is required") of a command line that gave both, checking the
// flags' values before the arguments left over.
func TestQuotaSetFlagsAfterTheTenant(t *testing.T) {
	c, rdb, _ := newCLI(t)
	for _, args := range [][]string{
		{"quota", "set", "acme", "-rate", "5", "-burst", "10"},
		{"quota", "set", "-rate", "5", "acme", "-burst", "10"},
	} {
		_, stderr, code := c.run(args...)
		if code != exitUsage || !strings.Contains(stderr, "flags go before the tenant") || strings.Contains(stderr, "is required") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message that the flags go before the tenant", args, code, stderr)
		}
	}
	if keys := keysUnder(t, rdb, c.prefix); len(keys) != 0 {
		t.Errorf("bad usage wrote %v", keys)
	}
}
