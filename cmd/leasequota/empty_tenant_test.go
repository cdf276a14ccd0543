package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestEmptyTenant: the library takes "" as a tenant like any other (its
// key is {t:}; AllowN and SetQuota accept it, and top lists it as ""),
// so the command reaches it too, named by -empty-tenant (an empty TENANT
// argument is refused: TestEmptyTenantArgumentIsRefused): an operator can
// cap, read, inspect and uncap it. The command refused it ("TENANT is
// empty", exit 2), so the tenant that top showed could not be acted on.
// The override it sets is the one a Limiter reads for "".
func TestEmptyTenant(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := newCLI(t)
	l, err := leasequota.New(rdb, leasequota.WithKeyPrefix(c.prefix), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if d := l.AllowN(ctx, "", 1); d.Reason == leasequota.ReasonInvalidQuota {
		t.Fatalf("the library refused tenant \"\": %+v", d)
	}
	if out, stderr, code := c.run("quota", "set", "-rate", "2", "-burst", "7", "-empty-tenant"); code != exitOK {
		t.Fatalf("quota set -empty-tenant: exit %d, stdout %q, stderr %q; want 0", code, out, stderr)
	}
	q, ok, err := l.GetQuota(ctx, "")
	if err != nil || !ok || q.Rate != 2 || q.Burst != 7 {
		t.Fatalf("the Limiter reads tenant \"\"'s override as %+v, %v, %v; want rate 2, burst 7", q, ok, err)
	}
	if out := c.mustRun("quota", "get", "-empty-tenant"); !strings.Contains(out, `""`) || !strings.Contains(out, "7") {
		t.Errorf("quota get -empty-tenant printed %q, want the tenant quoted and its burst 7", out)
	}
	if out := c.mustRun("inspect", "-empty-tenant"); !strings.Contains(out, `""`) {
		t.Errorf("inspect -empty-tenant printed %q, want the tenant quoted", out)
	}
	if out := c.mustRun("quota", "delete", "-empty-tenant"); !strings.Contains(out, "override deleted") {
		t.Errorf("quota delete -empty-tenant printed %q, want the override deleted", out)
	}
	if _, ok, err := l.GetQuota(ctx, ""); err != nil || ok {
		t.Errorf("after quota delete -empty-tenant: GetQuota says stored %v, %v; want none", ok, err)
	}
}

// TestEmptyTenantArgumentIsRefused: an empty TENANT argument (an unset
// shell variable: quota get "$TENANT") is refused as bad usage, exit 2,
// by every subcommand that takes a tenant, and nothing is written; the
// message says how to name the empty tenant (-empty-tenant). Since the
// command took "" as a TENANT, such a command line read, capped, uncapped
// or inspected tenant "" instead. -empty-tenant with a TENANT as well is
// refused too: it would be two tenants.
func TestEmptyTenantArgumentIsRefused(t *testing.T) {
	c, rdb, _ := newCLI(t)
	for _, sub := range [][]string{
		{"quota", "set", "-rate", "2", "-burst", "7"},
		{"quota", "get"},
		{"quota", "delete"},
		{"inspect"},
	} {
		args := append(sub[:len(sub):len(sub)], "")
		_, stderr, code := c.run(args...)
		if code != exitUsage || !strings.Contains(stderr, "TENANT is empty") || !strings.Contains(stderr, "-empty-tenant") {
			t.Errorf("%q: exit %d, stderr %q; want %d, TENANT is empty and the flag that names the empty tenant", args, code, stderr, exitUsage)
		}
		for _, args := range [][]string{append(sub[:len(sub):len(sub)], "-empty-tenant", "acme"), append(sub[:len(sub):len(sub)], "-empty-tenant", "")} {
			_, stderr, code := c.run(args...)
			if code != exitUsage || !strings.Contains(stderr, "-empty-tenant") {
				t.Errorf("%q: exit %d, stderr %q; want %d and -empty-tenant named", args, code, stderr, exitUsage)
			}
		}
	}
	if keys := keysUnder(t, rdb, c.prefix); len(keys) != 0 {
		t.Errorf("refused command lines wrote %q", keys)
	}
}

// TestEmptyTenantErrorIsSentinel: the refusal wraps errEmptyTenant and
// errUsage, so that report gives it exit status 2.
func TestEmptyTenantErrorIsSentinel(t *testing.T) {
	fs := flag.NewFlagSet("quota get", flag.ContinueOnError)
	empty := emptyTenantFlag(fs)
	if err := fs.Parse([]string{""}); err != nil {
		t.Fatal(err)
	}
	_, err := tenantArg(fs, *empty)
	if !errors.Is(err, errEmptyTenant) || !errors.Is(err, errUsage) {
		t.Fatalf("tenantArg of \"\" = %v; want errEmptyTenant and errUsage wrapped", err)
	}
}
