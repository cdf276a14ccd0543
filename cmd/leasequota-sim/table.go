package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// writeSummary prints the run's parameters, the table per tenant class,
// the bound verdict, the Redis traffic and the baseline comparison.
func writeSummary(out io.Writer, res *Result) {
	c := res.Config
	fmt.Fprintf(out, "\nleasequota-sim: scenario %s, %d instances, %d tenants, %v, Redis %s\n",
		c.Scenario, c.Instances, c.Tenants, c.Duration, res.Redis)
	fmt.Fprintf(out, "limiters: refresh %v, lease TTL %v, Redis timeout %v; demand x%g; seed %d\n\n", c.Refresh, c.LeaseTTL, c.redisTimeout(), c.Load, c.Seed)
	if c.Scenario == "fleet" {
		writeFleetTable(out, res)
		fmt.Fprintln(out)
	}
	writeClassTable(out, res)
	fmt.Fprintln(out)
	if res.Account != nil {
		writeAccountTable(out, res)
		fmt.Fprintln(out)
	}
	for _, l := range verdictLines(res) {
		fmt.Fprintln(out, l)
	}
	fmt.Fprintln(out)
	writeInstanceTable(out, res)
	if len(res.Logs) > 0 {
		fmt.Fprintln(out, "\nlimiter log:")
		for _, l := range logLines(res, 8) {
			fmt.Fprintln(out, l)
		}
	}
	if res.Baseline != nil {
		fmt.Fprintln(out)
		writeBaselineTable(out, res)
	}
}

// classRow is one line of the class table, as text.
type classRow struct {
	Name, Tenants, Quota, Burst, Offered, Admitted, Bound, Util, Over, Degraded, Lease, Calls, P50, P99 string
}

var classHeader = classRow{"class", "tenants", "quota/s", "burst", "offered/s", "admitted", "bound", "util", "over", "degraded", "lease", "calls/1k", "p50", "p99"}

func (r classRow) Cells() []string {
	return []string{r.Name, r.Tenants, r.Quota, r.Burst, r.Offered, r.Admitted, r.Bound, r.Util, r.Over, r.Degraded, r.Lease, r.Calls, r.P50, r.P99}
}

// classRows renders the class table's rows, the total last. The text
// table and the HTML report use the same strings.
func classRows(res *Result) []classRow {
	secs := res.Run.Seconds()
	var rows []classRow
	for _, c := range res.Classes {
		rows = append(rows, classRow{
			Name:     c.Name,
			Tenants:  fmt.Sprint(c.Tenants),
			Quota:    group(int64(c.Rate)),
			Burst:    group(c.Burst),
			Offered:  group(int64(math.Round(float64(c.Offered) / secs))),
			Admitted: group(c.Admitted),
			Bound:    group(int64(math.Floor(c.Bound))),
			Util:     pct(c.Utilization),
			Over:     group(c.OverAdmission),
			Degraded: group(c.Unavailable + c.Degraded),
			Lease:    fmt.Sprintf("%.1f", c.MeanLease),
			Calls:    fmt.Sprintf("%.1f", c.CallsPer1k),
			P50:      fmtDur(c.P50),
			P99:      fmtDur(c.P99),
		})
	}
	t := res.Total
	var quota, bound, ideal float64
	var over int64
	for _, c := range res.Classes {
		quota += c.Rate * float64(c.Tenants)
		bound += c.Bound
		ideal += c.Ideal
		over += c.OverAdmission
	}
	util := 0.0
	if ideal > 0 {
		util = float64(t.Admitted) / ideal
	}
	calls := 0.0
	if t.Decisions > 0 {
		calls = 1000 * float64(t.Scripts) / float64(t.Decisions)
	}
	rows = append(rows, classRow{
		Name:     "all",
		Tenants:  fmt.Sprint(len(res.Tenants)),
		Quota:    group(int64(quota)),
		Burst:    "",
		Offered:  group(int64(math.Round(float64(t.Offered) / secs))),
		Admitted: group(t.Admitted),
		Bound:    group(int64(math.Floor(bound))),
		Util:     pct(util),
		Over:     group(over),
		Degraded: group(t.Unavailable + t.Degraded),
		Lease:    "",
		Calls:    fmt.Sprintf("%.1f", calls),
		P50:      fmtDur(t.P50),
		P99:      fmtDur(t.P99),
	})
	return rows
}

func writeClassTable(out io.Writer, res *Result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	for i, r := range append([]classRow{classHeader}, classRows(res)...) {
		cells := r.Cells()
		if i == 0 {
			cells[0] = "class"
		}
		// Left-align the class name: pad it ourselves.
		cells[0] = fmt.Sprintf("%-14s", cells[0])
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	tw.Flush()
	fmt.Fprintf(out, "\nquota/s and burst are per tenant (all: the sum); bound = sum of Burst + Rate*T, T = %.2fs (the workload, Close excluded);\n", res.BoundT().Seconds())
	fmt.Fprintln(out, "util = admitted / what one exact global token bucket would admit of the same requests;")
	fmt.Fprintln(out, "over = admitted above the bound; degraded = decided by the failure mode while Redis was unreachable;")
	fmt.Fprintln(out, "lease = mean lease size per instance (tokens); calls/1k = lease script runs per 1,000 decisions;")
	fmt.Fprintln(out, "p50/p99 = AllowN latency from a sample.")
}

// instanceRow is one line of the per-instance table.
type instanceRow struct{ Name, Active, Offered, Admitted, AdmitPct, Over1, Over2 string }

// instanceRows renders each instance's decisions.
func instanceRows(res *Result) []instanceRow {
	var rows []instanceRow
	for _, in := range res.Instances {
		rows = append(rows, instanceRow{
			Name:     fmt.Sprintf("instance %d", in.Slot),
			Active:   fmt.Sprintf("%.1fs-%.1fs", in.Start.Seconds(), in.Stop.Seconds()),
			Offered:  group(in.Offered),
			Admitted: group(in.Admitted),
			AdmitPct: ratioPct(in.Admitted, in.Offered),
			Over1:    ratioPct(in.OverAdmitted[0], in.OverOffered[0]),
			Over2:    ratioPct(in.OverAdmitted[1], in.OverOffered[1]),
		})
	}
	return rows
}

func ratioPct(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return pct(float64(a) / float64(b))
}

func writeInstanceTable(out io.Writer, res *Result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-12s\tactive\toffered\tadmitted\tadmitted %%\tover-quota tenants: 1st half\t2nd half\t\n", "instance")
	for _, r := range instanceRows(res) {
		fmt.Fprintf(tw, "%-12s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.Active, r.Offered, r.Admitted, r.AdmitPct, r.Over1, r.Over2)
	}
	tw.Flush()
	fmt.Fprintln(out, "(admitted with or without a lease; the last columns: share of the over-quota tenants' requests")
	fmt.Fprintln(out, "admitted on the instance, which a single global limiter would keep equal across instances)")
}

// verdictLines state the bound check, the Redis traffic and the degraded
// decisions.
func verdictLines(res *Result) []string {
	var l []string
	t := res.Total
	if res.BoundOK() {
		l = append(l, "bound: OK: every tenant admitted at most Burst + Rate*T over the run,",
			fmt.Sprintf("       and at most Burst + Rate*(W + %v) in every window W.", res.WindowL))
	} else {
		l = append(l, fmt.Sprintf("bound: VIOLATED by %d tenant(s):", countTenants(res.Violations)))
		for i, v := range res.Violations {
			if i == 10 {
				l = append(l, fmt.Sprintf("  ... and %d more", len(res.Violations)-10))
				break
			}
			what := "over the run, Burst + Rate*T"
			if v.Kind == "window" {
				what = fmt.Sprintf("in a window W, Burst + Rate*(W + %v)", res.WindowL)
			}
			l = append(l, fmt.Sprintf("  %s admitted %.0f > %.1f (%s) in [%.1fs, %.1fs]", v.Tenant, v.Admitted, v.Bound, what, v.From.Seconds(), v.To.Seconds()))
		}
	}
	l = append(l, fmt.Sprintf("Redis: %s round trips (%.1f per 1,000 decisions; a pipeline counts once), %s lease script runs;",
		group(t.RoundTrips), t.RoundTripsPer1k, group(t.Scripts)))
	l = append(l, fmt.Sprintf("       %s tokens granted of %s asked, %s returned; %s failed lease calls; Close: %s round trips.",
		group(res.Lib.Granted), group(res.Lib.Requested), group(res.Lib.Returned), group(res.Lib.Errors), group(t.CloseRoundTrips)))
	l = append(l, cpuLine(res))
	for _, e := range res.Events {
		if e.Kind == "outage" {
			l = append(l, fmt.Sprintf("outage %.1fs-%.1fs, failure mode %s: once leases ran out, %s requests were admitted",
				e.From.Seconds(), e.To.Seconds(), modeLabel(res), group(t.Degraded)),
				fmt.Sprintf("       without a lease (outside the bound) and %s denied by the failure mode.", group(t.Unavailable)))
		}
	}
	for _, e := range res.CloseErrs {
		l = append(l, "close: "+e)
	}
	return l
}

// cpuLine states the Redis CPU the workload cost, or why it is unknown.
func cpuLine(res *Result) string {
	t := res.Total
	if per, ok := t.CPUPerDecision(); ok {
		return fmt.Sprintf("Redis CPU: %.3fs during the workload, %s per decision (INFO cpu, user + system; other clients of the server count too).",
			t.RedisCPU.Seconds(), fmtNanos(per))
	}
	if res.Config.embedded() {
		return "Redis CPU: n/a (the embedded Redis runs in this process and has no INFO cpu; use -redis to measure it)."
	}
	return "Redis CPU: n/a (INFO cpu could not be read)."
}

// modeLabel names the failure mode(s) that decided while Redis was
// unreachable, as the decisions reported them.
func modeLabel(res *Result) string {
	var names []string
	for m := range res.Modes {
		names = append(names, m)
	}
	slices.Sort(names)
	switch {
	case len(names) > 0:
		return strings.Join(names, ", ")
	case res.Config.Failure == "default":
		return "the library's default"
	}
	return res.Config.Failure
}

// logLines renders the limiters' log for the summary, at most n lines.
func logLines(res *Result, n int) []string {
	var out []string
	for i, l := range res.Logs {
		if i == n {
			out = append(out, fmt.Sprintf("  ... %d more lines (all in the report)", len(res.Logs)-n+res.LogsDropped))
			break
		}
		out = append(out, fmt.Sprintf("  %6.2fs instance %d %-5s %s", l.At.Seconds(), l.Instance, l.Level, l.Text))
	}
	return out
}

func countTenants(vs []Violation) int {
	m := map[string]bool{}
	for _, v := range vs {
		m[v.Tenant] = true
	}
	return len(m)
}

// baselineRow is one line of the comparison.
type baselineRow struct{ Name, Lease, Base, Ratio string }

// baselineRows renders the comparison with the per-request limiter. The
// first rows are what leasing changes: Redis round trips and CPU per
// decision, and decision latency. The last ones describe the workload:
// both limiters are offered the same requests, and one that keeps up
// decides them all, so decided/s is the offered load, not a capacity;
// the per-request limiter sheds what its Redis cannot serve in time.
func baselineRows(res *Result) []baselineRow {
	b := res.Baseline
	t := res.Total
	secs := res.Run.Seconds()
	// The round trips were counted until every request goroutine had
	// stopped (WorkT), the baseline's until its last decision: each over
	// its own window, not the nominal -duration.
	lqRT := float64(t.RoundTrips) / res.workload().Seconds()
	bRT := float64(b.RoundTrips) / b.Duration.Seconds()
	lqCPU, lqOK := t.CPUPerDecision()
	bCPU, bOK := b.CPUPerDecision()
	cpuRatio := ""
	if lqOK && bOK {
		cpuRatio = ratio(bCPU, lqCPU, "less", "more")
	}
	return []baselineRow{
		{"Redis round trips / 1,000 decisions", fmt.Sprintf("%.1f", t.RoundTripsPer1k), fmt.Sprintf("%.1f", b.RoundTripsPer1k), ratio(b.RoundTripsPer1k, t.RoundTripsPer1k, "fewer", "more")},
		{"Redis CPU / decision", cpuCell(lqCPU, lqOK), cpuCell(bCPU, bOK), cpuRatio},
		{"decision latency p50", fmtDur(t.P50), fmtDur(b.P50), ratio(float64(b.P50), float64(t.P50), "faster", "slower")},
		{"decision latency p99", fmtDur(t.P99), fmtDur(b.P99), ratio(float64(b.P99), float64(t.P99), "faster", "slower")},
		{"Redis round trips/s", perSec(lqRT), perSec(bRT), ratio(bRT, lqRT, "fewer", "more")},
		{"offered/s (the workload)", perSec(float64(t.Offered) / secs), perSec(float64(b.Offered) / b.Duration.Seconds()), ""},
		{"decided/s", perSec(t.DecisionsPerSec), perSec(b.DecisionsPerSec), ""},
		{"shed (offered, not decided)", "0", group(b.Shed), ""},
	}
}

// cpuCell formats a CPU time per decision, or n/a.
func cpuCell(ns float64, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmtNanos(ns)
}

func writeBaselineTable(out io.Writer, res *Result) {
	b := res.Baseline
	fmt.Fprintf(out, "per-request baseline: %s,\nsteady workload for %.1fs on the same Redis, %d instances x %d goroutines:\n\n",
		b.Name, b.Duration.Seconds(), res.Config.Instances, baselineConsumers)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-36s\tleasequota\tper-request\tleasequota is\t\n", "")
	for _, r := range baselineRows(res) {
		fmt.Fprintf(tw, "%-36s\t%s\t%s\t%s\t\n", r.Name, r.Lease, r.Base, r.Ratio)
	}
	tw.Flush()
	if b.Errors > 0 {
		fmt.Fprintf(out, "%s baseline calls failed.\n", group(b.Errors))
	}
	fmt.Fprintln(out, "\nBoth were offered the same workload: decided/s is the offered load when a limiter keeps up, not a capacity.")
	if res.Config.embedded() {
		fmt.Fprintln(out, "The embedded Redis runs each script in a new Lua interpreter, far slower than redis-server: there the")
		fmt.Fprintln(out, "per-request limiter sheds requests and its latency includes queueing. Round trips per decision hold on")
		fmt.Fprintln(out, "any Redis; run with -redis for latency and Redis CPU on a real server.")
	}
}

// ratio says how many times a is of b: "12.3x more".
func ratio(a, b float64, more, less string) string {
	switch {
	case a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b):
		return ""
	case math.Abs(a-b) <= 0.05*math.Max(a, b):
		return "about the same"
	case a >= b:
		return fmtRatio(a/b) + " " + more
	default:
		return fmtRatio(b/a) + " " + less
	}
}

func fmtRatio(x float64) string {
	switch {
	case x >= 100:
		return group(int64(math.Round(x))) + "x"
	case x >= 10:
		return fmt.Sprintf("%.0fx", x)
	default:
		return fmt.Sprintf("%.1fx", x)
	}
}

// fmtNanos formats a duration given in (possibly fractional) nanoseconds
// like fmtDur: 0.4ns, 95ns, 1.2µs.
func fmtNanos(ns float64) string {
	switch {
	case ns >= 1000:
		return fmtDur(time.Duration(math.Round(ns)))
	case ns >= 10:
		return fmt.Sprintf("%.0fns", ns)
	default:
		return trimZero(fmt.Sprintf("%.1f", ns)) + "ns"
	}
}

// perSec formats a rate, rounded to a whole number.
func perSec(x float64) string { return group(int64(math.Round(x))) }

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// fmtDur formats a latency with 2-3 significant digits: 95ns, 1.2µs,
// 310µs, 1.2ms.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < 10*time.Microsecond:
		return trimZero(fmt.Sprintf("%.1f", float64(d)/1e3)) + "µs"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return trimZero(fmt.Sprintf("%.1f", float64(d)/1e6)) + "ms"
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// fleetRow is one line of the fleet scenario's headline.
type fleetRow struct{ Name, Lease, Base, Ratio string }

// fleetNumbers are the fleet headline's measures of a run.
type fleetNumbers struct {
	cpuAdm, baseCPU     float64 // ns of Redis CPU per admitted request; the baseline's per decision
	cpuOK, baseCPUOK    bool
	scripts, baseScript float64 // script runs per second
	busy, baseBusy      float64 // Redis CPU per second of the run (1 = one core)
	util, baseUtil      float64 // admitted / Σ(Burst + Rate·T)
	failed, baseFailed  int64   // decisions by a failure mode; failed baseline calls
}

func fleetMeasures(res *Result) (f fleetNumbers) {
	t := res.Total
	// T is the workload, as the baseline's is its run (and the bound
	// check's, Result.BoundT; Elapsed would add Close's time). It is
	// also the window of the script runs and the Redis CPU, both read
	// once every request goroutine had stopped (WorkT): over the nominal
	// Run, the requests that finish after it would raise the rates above
	// what Redis did, where the baseline's are over its measured run.
	T := res.WorkT
	if T <= 0 {
		T = res.Run
	}
	f.cpuAdm, f.cpuOK = t.CPUPerAdmitted()
	f.scripts = float64(t.Evals) / T.Seconds()
	if f.cpuOK {
		f.busy = t.RedisCPU.Seconds() / T.Seconds()
	}
	var rate, burst float64
	for _, c := range res.Classes {
		rate += c.Rate * float64(c.Tenants)
		burst += float64(c.Burst) * float64(c.Tenants)
	}
	if d := burst + rate*T.Seconds(); d > 0 {
		f.util = float64(t.Admitted) / d
	}
	f.failed = t.Unavailable + t.Degraded
	if b := res.Baseline; b != nil && b.Duration > 0 {
		f.baseCPU, f.baseCPUOK = b.CPUPerDecision()
		f.baseScript = float64(b.Scripts) / b.Duration.Seconds()
		if b.HasCPU {
			f.baseBusy = b.RedisCPU.Seconds() / b.Duration.Seconds()
		}
		if d := burst + rate*b.Duration.Seconds(); d > 0 {
			f.baseUtil = float64(b.Admitted) / d
		}
		f.baseFailed = b.Errors
	}
	return f
}

// fleetRows are the fleet scenario's headline (issue #15): the Redis CPU
// per admitted request, against the per-request limiter's per decision,
// and the script runs per second, then what the tenants got.
func fleetRows(res *Result) []fleetRow {
	f := fleetMeasures(res)
	hasBase := res.Baseline != nil
	base := func(s string) string {
		if !hasBase {
			return "-"
		}
		return s
	}
	cpu := func(ns float64, ok bool, what string) string {
		if !ok {
			return "not measured"
		}
		return fmtNanos(ns) + what
	}
	times := func(a, b float64, ok bool) string {
		if !ok || a <= 0 || b <= 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	return []fleetRow{
		{"Redis CPU / admitted request", cpu(f.cpuAdm, f.cpuOK, ""), base(cpu(f.baseCPU, f.baseCPUOK, " per decision")), times(f.cpuAdm, f.baseCPU, f.cpuOK && f.baseCPUOK)},
		{"script runs/s", perSec(f.scripts), base(perSec(f.baseScript)), times(f.scripts, f.baseScript, hasBase)},
		{"Redis CPU busy (1 = one core)", cpuFrac(f.busy, f.cpuOK), base(cpuFrac(f.baseBusy, f.baseCPUOK)), ""},
		{"utilization of Σ(Burst + Rate·T)", pct(f.util), base(pct(f.baseUtil)), ""},
		{"decisions by a failure mode", group(f.failed), base(group(f.baseFailed) + " failed calls"), ""},
	}
}

func cpuFrac(x float64, ok bool) string {
	if !ok {
		return "not measured"
	}
	return fmt.Sprintf("%.2f", x)
}

func writeFleetTable(out io.Writer, res *Result) {
	c := res.Config
	fmt.Fprintf(out, "fleet (issue #15): %d instances x %d tenants of Rate %g, Burst %d, each offered %gx its quota:\n\n",
		c.Instances, c.Tenants, fleetTiers[0].rate, fleetTiers[0].burst, overFactor*c.Load)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-34s\tleasequota\tper-request\tleasequota / per-request\t\n", "")
	for _, r := range fleetRows(res) {
		fmt.Fprintf(tw, "%-34s\t%s\t%s\t%s\t\n", r.Name, r.Lease, r.Base, r.Ratio)
	}
	tw.Flush()
	if res.Baseline != nil {
		fmt.Fprintf(out, "per-request: %s, the same load for %.1fs on the same Redis, after the simulation.\n", res.Baseline.Name, res.Baseline.Duration.Seconds())
	} else {
		fmt.Fprintln(out, "per-request: skipped (-baseline 0).")
	}
	if c.embedded() {
		fmt.Fprintln(out, "Redis CPU: not measured: the embedded Redis (miniredis) runs in this process and has no INFO cpu; run with -redis.")
	} else {
		fmt.Fprintln(out, "Redis CPU: INFO cpu (user + system) during each run, every client of the server included.")
	}
	fmt.Fprintln(out, "script runs: the EVAL and EVALSHA calls sent; utilization: admitted (with a lease) / Σ(Burst + Rate·T).")
}
