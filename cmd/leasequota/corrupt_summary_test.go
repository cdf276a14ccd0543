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

// TestUnusableRegistrySummaryReadsAsNone: a registry summary (rg) that
// acquire.lua would not use (a demand or water level that is not finite,
// instances not a whole number >= 1) is no error to the scripts: the next
// acquire recomputes it (lease's TestCorruptRegistryIsRepaired). top and
// inspect read it as none, as the scripts do. They read "inf" and "nan"
// as numbers: top -json wrote no frame at all ("json: unsupported value:
// +Inf", every readable tenant lost with it), inspect -json wrote nothing,
// and the text top ranked the tenant first on a demand of +Inf/s.
func TestUnusableRegistrySummaryReadsAsNone(t *testing.T) {
	ctx := context.Background()
	for _, rg := range []string{":2:inf:-1", ":2:nan:-1", ":2:10:inf", ":inf:10:-1", ":0.5:10:-1"} {
		c, rdb, lc := newCLI(t)
		inst, err := lease.NewClient(rdb, c.prefix, lease.WithInstance("pod-1", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"good", "odd"} {
			if _, err := inst.AcquireMany(ctx, []lease.Request{{Tenant: tenant, Limits: lease.Limits{Rate: 1, Burst: 100}, Want: 20, Demand: 5}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, lc.Key("odd"), "rg", strconv.FormatInt(now.UnixMicro(), 10)+rg).Err(); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := c.run("-json", "top", "-once", "-sample", "100000")
		if code != exitOK {
			t.Errorf("rg %s: top -json -once: exit %d, stderr %q; want 0", rg, code, stderr)
		}
		fs := frames(t, out)
		if len(fs) != 1 || len(fs[0].Tenants) != 2 {
			t.Fatalf("rg %s: frames %+v: want one, with both tenants", rg, fs)
		}
		for _, tn := range fs[0].Tenants {
			if tn.Tenant == "odd" && tn.Instances != nil {
				t.Errorf("rg %s: odd's row shows %d instances from a summary the scripts do not use", rg, *tn.Instances)
			}
			if tn.Tenant == "good" && (tn.Instances == nil || *tn.Instances != 1) {
				t.Errorf("rg %s: good's row shows instances %v, want 1", rg, tn.Instances)
			}
		}
		out, stderr, code = c.run("-json", "inspect", "odd")
		var in struct {
			Registry *json.RawMessage `json:"registry"`
		}
		if code != exitOK || json.Unmarshal([]byte(out), &in) != nil || in.Registry != nil {
			t.Errorf("rg %s: inspect -json: exit %d, stdout %q, stderr %q; want 0 and \"registry\": null", rg, code, out, stderr)
		}
		if out := c.mustRun("inspect", "odd"); !strings.Contains(out, "no registry summary") {
			t.Errorf("rg %s: inspect printed %q, want no registry summary", rg, out)
		}
	}
}
