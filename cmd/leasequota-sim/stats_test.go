package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestIdealAdmitted(t *testing.T) {
	step := 100 * time.Millisecond
	// Under the rate: all admitted.
	if got := idealAdmitted([]int64{5, 5, 5, 5}, 100, 10, step); got != 20 {
		t.Errorf("under: %v, want 20", got)
	}
	// Far over: the burst, then the rate (10 per bucket, the first's too).
	if got := idealAdmitted([]int64{100, 100, 100}, 100, 50, step); got != 50+10+10+10 {
		t.Errorf("over: %v, want 80", got)
	}
	// Idle buckets refill up to the burst only.
	if got := idealAdmitted([]int64{100, 0, 0, 0, 0, 0, 0, 0, 100}, 100, 20, step); got != 60 {
		t.Errorf("idle gap: %v, want 60", got)
	}
}

func TestWorstWindow(t *testing.T) {
	step := 100 * time.Millisecond
	// Rate 10/s is 1 per bucket; burst 5; L 1s adds 10.
	adm := []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	ex, _, _ := worstWindow(adm, 10, 5, step, time.Second)
	if ex > 0 {
		t.Errorf("steady at the rate: excess %v, want <= 0", ex)
	}
	// 20 in one bucket, none around: 20 - (5 + 1 + 10) = 4 over.
	adm = []int64{0, 0, 0, 0, 20, 0, 0}
	ex, from, to := worstWindow(adm, 10, 5, step, time.Second)
	if math.Abs(ex-4) > 1e-9 || from != 400*time.Millisecond || to != 500*time.Millisecond {
		t.Errorf("spike: excess %v in [%v, %v], want 4 in [400ms, 500ms]", ex, from, to)
	}
	// Two spikes apart: the window spanning both is worse.
	adm = []int64{20, 0, 0, 20}
	ex, from, to = worstWindow(adm, 10, 5, step, time.Second)
	if math.Abs(ex-(40-5-4-10)) > 1e-9 || from != 0 || to != 400*time.Millisecond {
		t.Errorf("two spikes: excess %v in [%v, %v], want 21 in [0, 400ms]", ex, from, to)
	}
	if ex, _, _ := worstWindow(nil, 10, 5, step, time.Second); ex > 0 {
		t.Errorf("empty: %v", ex)
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	if p := percentile(s, 0.5); p != 50 {
		t.Errorf("p50 %v", p)
	}
	if p := percentile(s, 0.99); p != 99 {
		t.Errorf("p99 %v", p)
	}
	if s[0] != 100 {
		t.Errorf("percentile sorted its input")
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("empty: %v", p)
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := group(in); got != want {
			t.Errorf("group(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{0: "-", 95: "95ns", 1200: "1.2µs", 1000: "1µs", 310 * time.Microsecond: "310µs", 1200 * time.Microsecond: "1.2ms", 23 * time.Millisecond: "23ms"} {
		if got := fmtDur(in); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", in, got, want)
		}
	}
	if got := ratio(1000, 6.4, "fewer", "more"); got != "156x fewer" {
		t.Errorf("ratio: %q", got)
	}
	if got := ratio(2, 8, "more", "fewer"); got != "4.0x fewer" {
		t.Errorf("ratio: %q", got)
	}
	for in, want := range map[float64]string{0.43: "0.4ns", 12.6: "13ns", 1234: "1.2µs", 25000: "25µs"} {
		if got := fmtNanos(in); got != want {
			t.Errorf("fmtNanos(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestParseCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n"
	if d, err := parseCPU(info); err != nil || d != 1750*time.Millisecond {
		t.Errorf("parseCPU = %v, %v; want 1.75s", d, err)
	}
	if _, err := parseCPU("# CPU\r\n"); err == nil {
		t.Error("parseCPU of an empty section: no error")
	}
	if _, ok := cpuSince(cpuSample{used: time.Second, ok: true}, cpuSample{}); ok {
		t.Error("cpuSince with an unread sample is known")
	}
	if d, ok := cpuSince(cpuSample{used: time.Second, ok: true}, cpuSample{used: 3 * time.Second, ok: true}); !ok || d != 2*time.Second {
		t.Errorf("cpuSince = %v, %v; want 2s", d, ok)
	}
}

// TestViolationDetected feeds the result computation a tenant that
// admitted more than its bound, through the same path as a run.
func TestViolationDetected(t *testing.T) {
	cfg := testConfig("steady")
	cfg.Tenants, cfg.Instances, cfg.Workers, cfg.Duration = 1, 1, 1, time.Second
	cfg.LeaseTTL = time.Second // the window bound's L, below
	w := newWorkload(cfg)
	r := newRunner(cfg, w, &backend{Label: "test"})
	r.start = time.Now()
	inst := &instance{slot: 0, cc: newCallCounter(r.keyIndex, 1),
		leaseSum: make([]float64, r.nb), leaseN: make([]int32, r.nb)}
	ws := &workerStats{tenants: []int{0},
		off: make([]int32, r.nb), adm: make([]int32, r.nb), deg: make([]int32, r.nb), all: make([]int32, r.nb),
		denied: make([]int64, 1), unavail: make([]int64, 1), lat: make([][]time.Duration, 1), seen: make([]int64, 1)}
	// Quota 2000/s, burst 400: 3000 in the first bucket breaks both the
	// window bound (400 + 2000*(0.1+1) = 2600) and the total bound over
	// 1 s (400 + 2000*1 = 2400).
	ws.off[0], ws.adm[0] = 3000, 3000
	inst.workers = []*workerStats{ws}
	r.insts = []*instance{inst}
	res := r.result(r.start.Add(time.Second), newCallSeriesFinished(r.nb))
	if res.BoundOK() || len(res.Violations) != 2 {
		t.Fatalf("violations %+v, want a total and a window one", res.Violations)
	}
	if res.Classes[0].OverAdmission != 600 {
		t.Errorf("over-admission %d, want 600", res.Classes[0].OverAdmission)
	}
	// Degraded admissions are outside the bound.
	ws.adm[0], ws.deg[0] = 0, 3000
	if res := r.result(r.start.Add(time.Second), newCallSeriesFinished(r.nb)); !res.BoundOK() || res.Total.Degraded != 3000 {
		t.Fatalf("degraded admissions counted in the bound: %+v", res.Violations)
	}
}

func newCallSeriesFinished(nb int) *callSeries {
	c := newCallSeries(nb)
	c.finish(nb, time.Second, 0, 0, 0, 0, cpuPoint{}, false)
	return c
}

// TestCallSeriesFinish checks how the sampled series are completed:
// unsampled points carry the previous total, and the Redis CPU series is
// the readings interpolated at the bucket edges, at the time each was
// made, non-decreasing, never above the total, ending at it.
func TestCallSeriesFinish(t *testing.T) {
	const ms = time.Millisecond
	c := newCallSeries(5)
	for i, n := range map[int]int64{1: 10, 3: 30} { // sampled together
		c.roundTrips[i], c.scripts[i], c.errors[i], c.evals[i] = n, n, 0, n
	}
	// Step 100ms. The tick of 100ms read at 150ms; the tick of 200ms was
	// missed; 300ms read at 300ms but less than before (clamped); 400ms
	// read above the total (clamped).
	c.cpuAt = []cpuPoint{{150 * ms, 30 * ms}, {300 * ms, 20 * ms}, {400 * ms, 90 * ms}}
	c.finish(5, 100*ms, 50, 50, 0, 50, cpuPoint{520 * ms, 80 * ms}, true)
	if want := []int64{0, 10, 10, 30, 30, 50}; !slices.Equal(c.evals, want) {
		t.Errorf("evals %v, want %v", c.evals, want)
	}
	want := []int64{0, int64(20 * ms), int64(30 * ms), int64(30 * ms), int64(80 * ms), int64(80 * ms)}
	if !slices.Equal(c.cpu, want) {
		t.Errorf("cpu %v, want %v", c.cpu, want)
	}
	if !c.cpuOK {
		t.Error("cpu not ok")
	}
	c = newCallSeries(2)
	c.finish(2, 100*ms, 0, 0, 0, 0, cpuPoint{}, false)
	if c.cpuOK {
		t.Error("cpu ok without a reading")
	}
}

// TestFleetUtilizationExcludesClose: the fleet headline's utilization is
// admitted over Σ(Burst + Rate·T) with T the workload, as the baseline's
// is its own run; Elapsed runs to the last Close, which would dilute it
// by Close's time.
func TestFleetUtilizationExcludesClose(t *testing.T) {
	res := &Result{Run: 2 * time.Second, Elapsed: 2110 * time.Millisecond,
		Classes: []ClassResult{{Tenants: 500, Rate: 100, Burst: 100, Bound: 500 * (100 + 100*2.11)}}}
	res.Total.Admitted = 113_671
	if got, want := fleetMeasures(res).util, 113_671.0/150_000; math.Abs(got-want) > 1e-9 {
		t.Errorf("utilization %.4f, want %.4f (T = the workload's 2 s, not the 2.11 s to the last Close)", got, want)
	}
}

// TestFleetRatesOverTheWorkload: the fleet headline's script runs a
// second and Redis CPU busy are over the workload's T (WorkT), the window
// in which the script runs and the CPU were counted (read once every
// request goroutine had stopped), as the baseline's are over its measured
// run; over the nominal Run, the requests that finish after it raise them.
func TestFleetRatesOverTheWorkload(t *testing.T) {
	res := &Result{Run: 8 * time.Second, WorkT: 10 * time.Second, Elapsed: 10500 * time.Millisecond,
		Classes: []ClassResult{{Tenants: 100, Rate: 100, Burst: 100}}}
	res.Total.Evals = 20_000
	res.Total.Admitted = 100_000
	res.Total.RedisCPU, res.Total.HasCPU = 2*time.Second, true
	f := fleetMeasures(res)
	if want := 2000.0; math.Abs(f.scripts-want) > 1e-9 {
		t.Errorf("script runs/s %.1f, want %.1f (20,000 over the workload's 10 s)", f.scripts, want)
	}
	if want := 0.2; math.Abs(f.busy-want) > 1e-9 {
		t.Errorf("Redis CPU busy %.3f, want %.3f (2 s of CPU over the workload's 10 s)", f.busy, want)
	}
}

// TestBoundEndsWithTheWorkload: a tenant's total bound is Burst +
// Rate*T with T the workload (WorkT, when the last request goroutine
// stopped): no request is admitted after it, so the final Close's time
// would only loosen the bound by Rate per second of it and hide an
// over-admission of that size.
func TestBoundEndsWithTheWorkload(t *testing.T) {
	cfg := testConfig("steady")
	cfg.Tenants, cfg.Instances, cfg.Workers, cfg.Duration = 1, 1, 1, time.Second
	cfg.LeaseTTL = time.Second
	w := newWorkload(cfg)
	r := newRunner(cfg, w, &backend{Label: "test"})
	r.start = time.Now()
	r.workT = time.Second // the requests stopped at 1 s; Close took 0.5 s more
	inst := &instance{slot: 0, cc: newCallCounter(r.keyIndex, 1),
		leaseSum: make([]float64, r.nb), leaseN: make([]int32, r.nb)}
	ws := &workerStats{tenants: []int{0},
		off: make([]int32, r.nb), adm: make([]int32, r.nb), deg: make([]int32, r.nb), all: make([]int32, r.nb),
		denied: make([]int64, 1), unavail: make([]int64, 1), lat: make([][]time.Duration, 1), seen: make([]int64, 1)}
	// Quota 2000/s, burst 400: 3000 admitted evenly over the 1 s break
	// the total bound 400 + 2000*1 = 2400 (and no window's: 400 +
	// 2000*(W + 1) is more than 3000 for every window W); over the 1.5 s
	// to the last Close it would be 3400.
	for b := 0; b < r.nb; b++ {
		ws.off[b] = int32(3000 / r.nb)
		ws.adm[b] = ws.off[b]
	}
	if got := int(ws.adm[0]) * r.nb; got != 3000 {
		t.Fatalf("%d buckets: %d admitted, want 3000", r.nb, got)
	}
	inst.workers = []*workerStats{ws}
	r.insts = []*instance{inst}
	res := r.result(r.start.Add(1500*time.Millisecond), newCallSeriesFinished(r.nb))
	if len(res.Violations) != 1 || res.Violations[0].Kind != "total" || res.Violations[0].Bound != 2400 {
		t.Fatalf("violations %+v, want a total one of bound 2400 (T = the workload's 1 s)", res.Violations)
	}
	if res.Classes[0].OverAdmission != 600 {
		t.Errorf("over-admission %d, want 600", res.Classes[0].OverAdmission)
	}
}

// TestRoundTripsPerSecondOverTheWorkload: the comparison's Redis round
// trips a second are over the window they were counted in, the workload
// (WorkT) for leasequota as the baseline's measured run for it.
func TestRoundTripsPerSecondOverTheWorkload(t *testing.T) {
	res := &Result{Run: 8 * time.Second, WorkT: 10 * time.Second,
		Baseline: &BaselineResult{Duration: 4 * time.Second, RoundTrips: 100_000, Decisions: 100_000}}
	res.Total.RoundTrips, res.Total.Decisions = 2000, 200_000
	for _, row := range baselineRows(res) {
		if row.Name != "Redis round trips/s" {
			continue
		}
		if row.Lease != "200" || row.Base != "25,000" {
			t.Errorf("round trips/s %s and %s, want 200 (2,000 over the workload's 10 s) and 25,000", row.Lease, row.Base)
		}
		return
	}
	t.Fatal("no Redis round trips/s row")
}
