package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestTopLeavesOutABucketTheScriptsCallCorrupt: a bucket whose level is
// NaN or infinite is corrupt to the scripts (every acquire of the tenant
// fails on it), so top reports it on stderr, leaves it out of the frame
// and exits 1, as for any bucket it cannot read; inspect fails on it.
// The Go side read "nan" and "inf" as numbers: top -json wrote no frame
// at all (the JSON encoder refused the NaN level, the readable tenants
// lost with it), and an infinite level showed as a full bucket.
func TestTopLeavesOutABucketTheScriptsCallCorrupt(t *testing.T) {
	ctx := context.Background()
	for _, tk := range []string{"nan", "inf", "-inf"} {
		c, rdb, lc := newCLI(t)
		if _, err := lc.Acquire(ctx, "good", lease.Limits{Rate: 1, Burst: 100}, 20); err != nil {
			t.Fatal(err)
		}
		c.mustRun("quota", "set", "-rate", "1", "-burst", "10", "bad")
		bad := lc.Key("bad")
		if err := rdb.HSet(ctx, bad, "tk", tk, "ts", "1000").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Expire(ctx, bad, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		// The scripts refuse the bucket.
		if _, err := lc.Acquire(ctx, "bad", lease.Limits{Rate: 1, Burst: 10}, 1); err == nil || !strings.Contains(err.Error(), "corrupt bucket") {
			t.Fatalf("tk %s: acquire = %v, want the scripts' corrupt bucket error", tk, err)
		}
		out, stderr, code := c.run("-json", "top", "-once")
		if code != exitFailure || !strings.Contains(stderr, "1 bucket reads failed") || !strings.Contains(stderr, "t:bad") {
			t.Errorf("tk %s: top -once: exit %d, stderr %q; want 1, the bad bucket reported", tk, code, stderr)
		}
		fs := frames(t, out)
		if len(fs) != 1 || len(fs[0].Tenants) != 1 || fs[0].Tenants[0].Tenant != "good" {
			t.Errorf("tk %s: frames %+v: want one, showing the readable bucket alone", tk, fs)
		}
		if _, stderr, code := c.run("-json", "inspect", "bad"); code != exitFailure || !strings.Contains(stderr, "tk") {
			t.Errorf("tk %s: inspect: exit %d, stderr %q; want 1 and the bad field named", tk, code, stderr)
		}
	}
}
