package main

import (
	"strings"
	"testing"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestFailureNamesTheTenantAsGiven: the message of a failed call names
// the tenant as the operator gave it. The command strips the library's
// package prefixes ("lease: ", "leasequota: ") from every ": "-separated
// part of the message, the quoted tenant's included: a failure about
// tenant "x: lease: y" named "x: y", another tenant.
func TestFailureNamesTheTenantAsGiven(t *testing.T) {
	srv := redisserver.StartServer(t)
	url := srv.URL()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"x: lease: y", "a: leasequota: b"} {
		for _, args := range [][]string{{"quota", "get", tenant}, {"quota", "set", "-rate", "1", "-burst", "1", tenant}, {"quota", "delete", tenant}, {"inspect", tenant}} {
			_, stderr, code := runBinary(t, append([]string{"-redis", url, "-timeout", "100ms"}, args...)...)
			if code != exitFailure || !strings.Contains(stderr, `"`+tenant+`": `) {
				t.Errorf("%v on a stopped server: exit %d, stderr %q; want 1 and the tenant %q named as given", args, code, stderr, tenant)
			}
		}
	}
}
