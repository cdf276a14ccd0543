package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestInspectJSONWithAnEntryNotANumber: a registry entry whose demand or
// credit is not a finite number (acquire.lua's read_entry takes such an
// entry for none, and a recompute counts its demand as 0) is shown by
// inspect -json with that field null, the rest of the tenant with it.
// encoding/json refused the NaN and inspect -json wrote nothing but
// "json: unsupported value: NaN", exit 1, though the text inspect showed
// the tenant.
func TestInspectJSONWithAnEntryNotANumber(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	inst, err := lease.NewClient(rdb, c.prefix, lease.WithInstance("pod-1", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lease.Limits{Rate: 1, Burst: 100}, Want: 20, Demand: 5}}, nil); err != nil {
		t.Fatal(err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := strconv.FormatInt(now.UnixMicro(), 10)
	if err := rdb.HSet(ctx, lease.InstancesKey(lc.Key("acme")), "pod-2", at+":nan:inf", "pod-3", at+":-inf:2").Err(); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := c.run("-json", "inspect", "acme")
	var in struct {
		Tenant    string
		Instances []struct {
			ID     string   `json:"id"`
			Demand *float64 `json:"demand_per_s"`
			Credit *float64 `json:"credit"`
		}
	}
	if code != exitOK || json.Unmarshal([]byte(out), &in) != nil {
		t.Fatalf("inspect -json: exit %d, stdout %q, stderr %q; want 0 and JSON", code, out, stderr)
	}
	got := map[string][2]*float64{}
	for _, e := range in.Instances {
		got[e.ID] = [2]*float64{e.Demand, e.Credit}
	}
	if e := got["pod-1"]; in.Tenant != "acme" || e[0] == nil || *e[0] != 5 || e[1] == nil {
		t.Errorf("pod-1's entry %v: want its demand 5 and its credit", e)
	}
	if e := got["pod-2"]; e[0] != nil || e[1] != nil {
		t.Errorf("pod-2's entry (nan, inf) %v: want both null", e)
	}
	if e := got["pod-3"]; e[0] != nil || e[1] == nil || *e[1] != 2 {
		t.Errorf("pod-3's entry (-inf, 2) %v: want demand null, credit 2", e)
	}
	if out := c.mustRun("inspect", "acme"); !strings.Contains(out, "NaN") {
		t.Errorf("inspect printed %q: want the stored NaN shown", out)
	}
}
