package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestEmptyTenant: the library takes "" as a tenant like any other (its
// key is {t:}; AllowN and SetQuota accept it, and top lists it as ""),
// so the command takes it too: an operator can cap, read, inspect and
// uncap it. The command refused it ("TENANT is empty", exit 2), so the
// tenant that top showed could not be acted on. The override it sets is
// the one a Limiter reads for "".
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
	if out, stderr, code := c.run("quota", "set", "-rate", "2", "-burst", "7", ""); code != exitOK {
		t.Fatalf("quota set \"\": exit %d, stdout %q, stderr %q; want 0", code, out, stderr)
	}
	q, ok, err := l.GetQuota(ctx, "")
	if err != nil || !ok || q.Rate != 2 || q.Burst != 7 {
		t.Fatalf("the Limiter reads tenant \"\"'s override as %+v, %v, %v; want rate 2, burst 7", q, ok, err)
	}
	if out := c.mustRun("quota", "get", ""); !strings.Contains(out, `""`) || !strings.Contains(out, "7") {
		t.Errorf("quota get \"\" printed %q, want the tenant quoted and its burst 7", out)
	}
	if out := c.mustRun("inspect", ""); !strings.Contains(out, `""`) {
		t.Errorf("inspect \"\" printed %q, want the tenant quoted", out)
	}
	if out := c.mustRun("quota", "delete", ""); !strings.Contains(out, "override deleted") {
		t.Errorf("quota delete \"\" printed %q, want the override deleted", out)
	}
	if _, ok, err := l.GetQuota(ctx, ""); err != nil || ok {
		t.Errorf("after quota delete \"\": GetQuota says stored %v, %v; want none", ok, err)
	}
}
