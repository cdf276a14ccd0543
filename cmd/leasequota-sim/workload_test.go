package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func testConfig(scenario string) Config {
	c := DefaultConfig()
	c.Scenario = scenario
	return c
}

func TestWorkloadTenants(t *testing.T) {
	w := newWorkload(testConfig("steady"))
	if len(w.Tenants) != 50 {
		t.Fatalf("%d tenants, want 50", len(w.Tenants))
	}
	tiers := map[string]int{}
	for _, tn := range w.Tenants {
		tiers[strings.SplitN(tn.Name, "-", 2)[0]]++
		if err := tn.Quota.Validate(); err != nil {
			t.Errorf("%s: %v", tn.Name, err)
		}
	}
	if tiers["large"] != 3 || tiers["medium"] != 12 || tiers["small"] != 35 {
		t.Fatalf("tiers %v, want 3 large, 12 medium, 35 small", tiers)
	}
	if len(w.Classes) != 9 {
		t.Fatalf("%d classes, want 9 (3 tiers x 3 patterns)", len(w.Classes))
	}
	n := 0
	for ci, c := range w.Classes {
		for _, ti := range c.Tenants {
			if w.Tenants[ti].Class != ci || w.Tenants[ti].Pattern != c.Pattern || w.Tenants[ti].Quota.Rate != c.Rate {
				t.Errorf("tenant %s is not of class %s", w.Tenants[ti].Name, c.Name)
			}
			n++
		}
	}
	if n != 50 {
		t.Fatalf("classes hold %d tenants, want 50", n)
	}
	// One tenant: one large, over-quota class.
	c := testConfig("steady")
	c.Tenants = 1
	if w := newWorkload(c); len(w.Classes) != 1 || w.Classes[0].Name != "large/over" {
		t.Fatalf("1 tenant: classes %+v", w.Classes)
	}
}

// TestWorkloadFleet checks the fleet scenario's tenants: one class, Rate
// 100 and Burst 100, each offered 3x its quota (times -load), evenly over
// the instances.
func TestWorkloadFleet(t *testing.T) {
	c := testConfig("fleet")
	c.Instances, c.Tenants, c.Load = 32, 2000, 2
	if err := c.Validate(); err != nil {
		t.Fatalf("fleet at 32 x 2000: %v", err)
	}
	w := newWorkload(c)
	if len(w.Tenants) != 2000 || len(w.Classes) != 1 || len(w.Classes[0].Tenants) != 2000 {
		t.Fatalf("%d tenants in %d classes, want 2000 in one", len(w.Tenants), len(w.Classes))
	}
	for i, tn := range w.Tenants {
		if tn.Quota.Rate != 100 || tn.Quota.Burst != 100 || tn.Pattern != patOver {
			t.Fatalf("tenant %s: %+v, want Rate 100, Burst 100, over", tn.Name, tn)
		}
		if d := w.Demand(i, 3*time.Second); d != 600 {
			t.Fatalf("tenant %s: demand %v/s, want 3 x 100 x load 2", tn.Name, d)
		}
	}
	for s := range w.Slots() {
		if wt := w.Weight(s, time.Second); math.Abs(wt-1.0/32) > 1e-12 {
			t.Fatalf("instance %d weight %v, want 1/32", s, wt)
		}
	}
}

// TestRatesSafeForEmbeddedRedis guards a limitation of the embedded Redis:
// gopher-lua's tonumber reads a string without a '.' as an integer, so a
// rate that Go formats as "1e+06" is rejected by acquire.lua there.
func TestRatesSafeForEmbeddedRedis(t *testing.T) {
	for _, tr := range tiers {
		s := strconv.FormatFloat(tr.rate, 'g', -1, 64)
		if strings.ContainsAny(s, "eE") || tr.rate != math.Trunc(tr.rate) {
			t.Errorf("tier %s: rate %s must be a whole number in plain notation", tr.name, s)
		}
	}
}

func TestWorkloadDemand(t *testing.T) {
	w := newWorkload(testConfig("steady"))
	for _, tn := range w.Tenants {
		i := indexOf(w, tn.Name)
		r := tn.Quota.Rate
		switch tn.Pattern {
		case patOver:
			if d := w.Demand(i, 3*time.Second); d != 3*r {
				t.Errorf("%s over: demand %v, want %v", tn.Name, d, 3*r)
			}
		case patUnder:
			if d := w.Demand(i, 3*time.Second); d != r/2 {
				t.Errorf("%s under: demand %v, want %v", tn.Name, d, r/2)
			}
		case patBursty:
			// On for half of each period, at 6x.
			var on int
			for ms := 0; ms < 2000; ms++ {
				d := w.Demand(i, time.Duration(ms)*time.Millisecond)
				switch d {
				case 6 * r:
					on++
				case 0:
				default:
					t.Fatalf("%s bursty: demand %v", tn.Name, d)
				}
			}
			if on != 1000 {
				t.Errorf("%s bursty: on %d ms of 2000, want 1000", tn.Name, on)
			}
		}
	}
	b := newWorkload(testConfig("burst"))
	i := 0 // large/over
	if d0, d1 := b.Demand(i, time.Second), b.Demand(i, 5*time.Second); d1 != 4*d0 {
		t.Errorf("burst: demand at 5s %v, want 4x %v", d1, d0)
	}
	c := testConfig("steady")
	c.Load = 2
	if d := newWorkload(c).Demand(i, time.Second); d != 2*w.Demand(i, time.Second) {
		t.Errorf("-load 2: demand %v", d)
	}
}

func indexOf(w *workload, name string) int {
	for i, t := range w.Tenants {
		if t.Name == name {
			return i
		}
	}
	return -1
}

func TestWorkloadWeights(t *testing.T) {
	for _, s := range scenarios {
		w := newWorkload(testConfig(s))
		for ms := 0; ms < 10000; ms += 50 {
			at := time.Duration(ms) * time.Millisecond
			sum := 0.0
			for k := range w.Slots() {
				sum += w.Weight(k, at)
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("%s at %v: weights add up to %v", s, at, sum)
			}
		}
	}
	sk := newWorkload(testConfig("skew"))
	if sk.Weight(0, time.Second) != 0.7 || sk.Weight(1, 6*time.Second) != 0.7 || math.Abs(sk.Weight(0, 6*time.Second)-0.1) > 1e-12 {
		t.Errorf("skew: instance 0 hot first, instance 1 after half-way")
	}
	ch := newWorkload(testConfig("churn"))
	slots := ch.Slots()
	if len(slots) != 5 || slots[3].Stop != 3500*time.Millisecond || slots[4].Start != 5500*time.Millisecond {
		t.Fatalf("churn slots %+v", slots)
	}
	if ch.Weight(3, 4*time.Second) != 0 || ch.Weight(0, 4*time.Second) != 1.0/3 || ch.Weight(4, 6*time.Second) != 0.25 {
		t.Errorf("churn: weights while instance 3 is down or 4 is up")
	}
	from, to, ok := newWorkload(testConfig("outage")).Outage()
	if !ok || from != 4*time.Second || to != 6*time.Second {
		t.Errorf("outage window %v-%v %v", from, to, ok)
	}
	if _, _, ok := sk.Outage(); ok {
		t.Errorf("skew has no outage")
	}
	for _, s := range []string{"burst", "churn", "outage", "skew"} {
		if len(newWorkload(testConfig(s)).Events()) == 0 {
			t.Errorf("%s: no events for the report", s)
		}
	}
}
