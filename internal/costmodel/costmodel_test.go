package costmodel

import (
	"math"
	"testing"
)

var table = Table{
	AcquireFull:     10,
	AcquireHistory8: 16,
	AcquireEmpty:    8,
	AcquireRegistry: []RegistryCost{
		{1, 10},
		{16, 40},
		{32, 104},
	},
	Release:          5,
	OverrideRead:     3,
	VersionPoll:      0.5,
	RedisRateAllowed: 4,
	RedisRateDenied:  2,
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestAcquireInterpolatesTheRegistry(t *testing.T) {
	for _, c := range []struct {
		n     int
		empty bool
		want  float64
	}{
		{0, false, 10}, {1, false, 10}, {1, true, 8},
		{16, false, 40}, {16, true, 38},
		{6, false, 20},   // a third of the way from 1 to 16
		{24, false, 72},  // half way from 16 to 32
		{48, false, 168}, // beyond 32, on the slope of 16..32
	} {
		if got := table.Acquire(c.n, c.empty); !near(got, c.want) {
			t.Errorf("Acquire(%d, %v) = %v, want %v", c.n, c.empty, got, c.want)
		}
	}
}

func TestCostAddsUpByKind(t *testing.T) {
	var c Counts
	c.AddAcquire(1, false)
	c.AddAcquire(16, false)
	c.AddAcquire(16, true)
	c.AddAcquire(1000, false) // counted as MaxInstances
	c.Releases, c.OverrideReads, c.VersionPolls, c.BelowFull = 2, 1, 4, 2
	k := table.Cost(c)
	want := Cost{
		Acquire:  3 * 10,
		Empty:    8,
		Registry: 30 + 30 + table.registryExtra(MaxInstances),
		History:  2 * 6,
		Release:  10, Override: 3, Version: 2,
	}
	if k != want {
		t.Errorf("Cost = %+v, want %+v", k, want)
	}
	sum := 0.0
	for n := range c.Acquires {
		sum += float64(c.Acquires[n])*table.Acquire(n, false) + float64(c.Empty[n])*table.Acquire(n, true)
	}
	if !near(k.Acquire+k.Empty+k.Registry+k.History, sum+2*6) {
		t.Errorf("acquires cost %v by kind, %v call by call", k.Acquire+k.Empty+k.Registry, sum)
	}
	if c.Scripts() != 7 || c.AcquireTotal() != 4 || c.EmptyTotal() != 1 {
		t.Errorf("Scripts %d, AcquireTotal %d, EmptyTotal %d: want 7, 4, 1", c.Scripts(), c.AcquireTotal(), c.EmptyTotal())
	}
	var d Counts
	d.Add(&c)
	d.Add(&c)
	if d.Sub(c) != c {
		t.Errorf("(c + c) - c != c")
	}
	if got := table.Baseline(3, 5); got != 22 {
		t.Errorf("Baseline(3, 5) = %v, want 22", got)
	}
}

func TestMeasuredIsComplete(t *testing.T) {
	m := Measured
	for name, v := range map[string]float64{
		"AcquireFull": m.AcquireFull, "AcquireHistory8": m.AcquireHistory8, "AcquireEmpty": m.AcquireEmpty, "Release": m.Release,
		"OverrideRead": m.OverrideRead, "VersionPoll": m.VersionPoll,
		"RedisRateAllowed": m.RedisRateAllowed, "RedisRateDenied": m.RedisRateDenied,
	} {
		if !(v > 0) {
			t.Errorf("Measured.%s = %v: every price must be measured", name, v)
		}
	}
	r := m.AcquireRegistry
	if len(r) < 2 || r[0].Instances != 1 || r[0].USec != m.AcquireFull {
		t.Errorf("Measured.AcquireRegistry = %v: want N = 1 first, at AcquireFull (%v), and more", r, m.AcquireFull)
	}
	for i := 1; i < len(r); i++ {
		if r[i].Instances <= r[i-1].Instances {
			t.Errorf("Measured.AcquireRegistry not in rising order of instances: %v", r)
		}
	}
}
