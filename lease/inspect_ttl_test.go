package lease

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestInspectTTLPastDuration: a bucket that refills for more than a
// time.Duration holds (about 292 years: a quota of 10 tokens for good,
// Rate 1e-9 or 5e-10) has a key TTL of up to 1e15 ms (store, in
// common.lua). Inspect read PTTL in milliseconds and multiplied it into a
// Duration, which wrapped: a drained bucket at 1e-9/s (TTL 1e13 ms) was
// reported with a negative TTL (no expiry: the command printed "key
// expiry none"), one at 5e-10/s (2e13 ms) with a TTL of about 49 years,
// from which Level estimated a rate 13 times the real one. The TTL is
// now saturated at the longest Duration, and Level makes no estimate
// from it.
func TestInspectTTLPastDuration(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	for _, rate := range []float64{1e-9, 5e-10} {
		tenant := "lifetime-" + formatRate(rate)
		lim := Limits{Rate: rate, Burst: 10}
		if g := acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Want: 10}); g.Granted != 10 {
			t.Fatalf("rate %g: grant %+v, want the whole burst", rate, g)
		}
		// Raw: go-redis's PTTL makes a Duration of it, and wraps too.
		pttl, err := rdb.Do(ctx, "PTTL", c.Key(tenant)).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if want := 10 / rate * 1000; math.Abs(float64(pttl)-want) > 2000 {
			t.Fatalf("rate %g: PTTL %d ms, want about %g: the test proves nothing", rate, pttl, want)
		}
		in := inspect(t, c, tenant)
		if in.TTL != math.MaxInt64 {
			t.Errorf("rate %g: Inspect TTL %v (%d ns), want the longest Duration: the key expires in %g ms", rate, in.TTL, int64(in.TTL), 10/rate*1000)
		}
		if lv := in.Level(); lv.Known && math.Abs(lv.Rate-rate) > rate/100 {
			t.Errorf("rate %g: Level %+v estimates a rate of %g", rate, lv, lv.Rate)
		}
	}
	// A TTL a Duration holds is read exactly, as before.
	lim := Limits{Rate: 1e-6, Burst: 10}
	acquireOne(t, c, Request{Tenant: "decade", Limits: lim, Want: 10})
	in := inspect(t, c, "decade")
	if want := 1e7 * time.Second; in.TTL < want || in.TTL > want+2*time.Second {
		t.Errorf("TTL %v, want about %v", in.TTL, want+time.Second)
	}
	if lv := in.Level(); !lv.Known || math.Abs(lv.Rate-1e-6) > 1e-8 {
		t.Errorf("level %+v, want a rate of 1e-6 estimated from the TTL", lv)
	}
}
