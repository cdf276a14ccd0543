package main

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// Colours: a tenant class is coloured by its tier and dashed by its
// demand pattern, the same in every chart.
var (
	tierColor = map[string]string{"large": "#1f77b4", "medium": "#e6780b", "small": "#2ca02c", "fleet": "#1f77b4",
		"tight3000": "#1f77b4", "tight800": "#e6780b", "tight300": "#2ca02c", "low20": "#9467bd"}
	patDash   = map[string]string{"over": "", "under": "7 4", "bursty": "2 3"}
	slotColor = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}
)

const (
	colorQuota    = "#d62728"
	colorOffered  = "#8c8c8c"
	colorBase     = "#8c8c8c"
	colorLease    = "#1f77b4"
	colorDegraded = "#9467bd"
)

// writeReportFile writes the HTML report of res to path.
func writeReportFile(path string, res *Result) error {
	var buf bytes.Buffer
	if err := writeReport(&buf, res); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeReport renders res as one self-contained HTML page: inline CSS and
// SVG, no script, nothing fetched.
func writeReport(w io.Writer, res *Result) error {
	c := res.Config
	data := map[string]any{
		"Title":     fmt.Sprintf("leasequota simulation: %s", c.Scenario),
		"Scenario":  c.Scenario,
		"Help":      capitalize(scenarioHelp[c.Scenario]),
		"Res":       res,
		"Started":   res.Started.Format(time.RFC3339),
		"Params":    paramLine(res),
		"OK":        res.BoundOK(),
		"Verdict":   verdictLines(res),
		"Rows":      classRows(res),
		"Header":    classHeader.Cells(),
		"Cols":      []string{"class", "tenants", "quota", "burst", "offered", "admitted", "bound", "util", "over", "degraded", "lease", "calls", "p50", "p99"},
		"KPIs":      kpis(res),
		"Admitted":  template.HTML(classPanels(res)),
		"Share":     template.HTML(shareChart(res)),
		"Lease":     template.HTML(leaseChart(res)),
		"Redis":     template.HTML(redisChart(res)),
		"Cost":      template.HTML(costCharts(res)),
		"Fleet":     fleetRowsOrNil(res),
		"CPUNote":   cpuNote(res),
		"Baseline":  template.HTML(baselineCharts(res)),
		"BaseRows":  baselineRowsOrNil(res),
		"BoundT":    fmt.Sprintf("%.2f", res.BoundT().Seconds()),
		"LeaseTTL":  res.LeaseTTL.String(),
		"WindowL":   res.WindowL.String(),
		"Step":      res.Step.String(),
		"Embedded":  c.embedded(),
		"Timeout":   c.redisTimeout().String(),
		"Consumers": baselineConsumers,
		"Logs":      reportLogs(res),
		"Insts":     instanceRows(res),
		"Account":   accountTables(res),
		"Dropped":   res.LogsDropped,
	}
	return reportTmpl.Execute(w, data)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

type reportLog struct{ At, Instance, Level, Text string }

func reportLogs(res *Result) []reportLog {
	var out []reportLog
	for _, l := range res.Logs {
		out = append(out, reportLog{fmt.Sprintf("%.2fs", l.At.Seconds()), fmt.Sprint(l.Instance), l.Level, l.Text})
	}
	return out
}

func paramLine(res *Result) string {
	c := res.Config
	return fmt.Sprintf("%d instances x %d request goroutines, %d tenants, %v of traffic, Redis %s; limiters: refresh %v, lease TTL %v, Redis timeout %v; demand x%g; seed %d",
		c.Instances, c.Workers, c.Tenants, c.Duration, res.Redis, c.Refresh, c.LeaseTTL, c.redisTimeout(), c.Load, c.Seed)
}

type kpi struct{ Value, Label string }

// kpis are the report's headline: what leasing changes (Redis round trips
// and CPU per decision, decision latency), then the share admitted. The
// decision rate is the offered load, not a result, so it is not one.
func kpis(res *Result) []kpi {
	t := res.Total
	cpu, cpuOK := t.CPUPerDecision()
	cpuLabel := "Redis CPU per decision"
	if !cpuOK && res.Config.embedded() {
		cpuLabel += " (the embedded Redis has no INFO cpu: use -redis)"
	}
	k := []kpi{
		{fmt.Sprintf("%.1f", t.RoundTripsPer1k), "Redis round trips per 1,000 decisions"},
		{cpuCell(cpu, cpuOK), cpuLabel},
		{fmtDur(t.P50) + " / " + fmtDur(t.P99), "decision latency p50 / p99"},
		{pct(float64(t.Admitted) / math.Max(float64(t.Offered), 1)), "of requests admitted"},
	}
	if b := res.Baseline; b != nil {
		if t.RoundTripsPer1k > 0 {
			k = append(k, kpi{fmtRatio(b.RoundTripsPer1k/t.RoundTripsPer1k) + " fewer", "Redis round trips per decision than a per-request limiter"})
		}
		if bCPU, ok := b.CPUPerDecision(); ok && cpuOK && cpu > 0 {
			k = append(k, kpi{ratio(bCPU, cpu, "less", "more"), "Redis CPU per decision than a per-request limiter"})
		}
	}
	if res.Config.Scenario == "fleet" {
		k = append(fleetKPIs(res), k...)
	}
	return k
}

// fleetKPIs are the fleet scenario's headline numbers: Redis CPU per
// admitted request and script runs per second, against the per-request
// limiter.
func fleetKPIs(res *Result) []kpi {
	f := fleetMeasures(res)
	cpuLabel := "Redis CPU per admitted request"
	if !f.cpuOK && res.Config.embedded() {
		cpuLabel += " (not measured: the embedded Redis has no INFO cpu; use -redis)"
	}
	k := []kpi{{cpuCell(f.cpuAdm, f.cpuOK), cpuLabel}}
	if f.cpuOK && f.baseCPUOK && f.baseCPU > 0 {
		k = append(k, kpi{fmt.Sprintf("%.2fx", f.cpuAdm/f.baseCPU), "Redis CPU per admitted request / the per-request limiter's per decision (" + fmtNanos(f.baseCPU) + ")"})
	}
	k = append(k, kpi{perSec(f.scripts), "Redis script runs per second"})
	if res.Baseline != nil {
		k = append(k, kpi{perSec(f.baseScript), "script runs per second of the per-request limiter"})
	}
	k = append(k, kpi{pct(f.util), "utilization of Σ(Burst + Rate·T)"}, kpi{group(f.failed), "decisions by a failure mode"})
	return k
}

func fleetRowsOrNil(res *Result) []fleetRow {
	if res.Config.Scenario != "fleet" {
		return nil
	}
	return fleetRows(res)
}

// cpuNote says why the Redis CPU chart is missing, or "".
func cpuNote(res *Result) string {
	switch {
	case res.Series.RedisCPU != nil:
		return ""
	case res.Config.embedded():
		return "Redis CPU: not measured. The embedded Redis (miniredis) runs inside the simulator and has no INFO cpu; run with -redis to chart it."
	}
	return "Redis CPU: not measured (INFO cpu could not be read during the run)."
}

func baselineRowsOrNil(res *Result) []baselineRow {
	if res.Baseline == nil {
		return nil
	}
	return baselineRows(res)
}

// bucketTimes returns the midpoint (seconds) and width of each bucket.
func bucketTimes(res *Result, nb int) (mid, width []float64) {
	step := res.Step.Seconds()
	run := res.Run.Seconds()
	for b := 0; b < nb; b++ {
		lo := float64(b) * step
		hi := math.Min(lo+step, run)
		mid = append(mid, (lo+hi)/2)
		width = append(width, math.Max(hi-lo, 1e-9))
	}
	return mid, width
}

// drawEvents shades the run's events on a time chart, under the data.
func drawEvents(p *plot, res *Result) {
	for _, e := range res.Events {
		switch e.Kind {
		case "outage":
			p.band(e.From.Seconds(), e.To.Seconds(), "#fde0dd", e.Label)
		case "burst":
			p.band(e.From.Seconds(), e.To.Seconds(), "#fff3c4", e.Label)
		case "stopped":
			p.band(e.From.Seconds(), e.To.Seconds(), "#ececec", "1 instance down")
		case "off":
			p.band(e.From.Seconds(), e.To.Seconds(), "#ececec", "")
		case "hot":
			if e.From > 0 {
				p.marker(e.From.Seconds(), e.Label)
			}
		}
	}
}

func timeAxis(p *plot, res *Result) []float64 {
	p.X0, p.X1 = 0, res.Run.Seconds()
	t, _ := niceTicks(0, p.X1, 10)
	var in []float64
	for _, v := range t {
		if v <= p.X1+1e-9 {
			in = append(in, v)
		}
	}
	return in
}

// rates divides counts per bucket by the bucket widths; it also returns
// the sum of the counts.
func rates(counts []int64, width []float64) ([]float64, int64) {
	out := make([]float64, len(counts))
	var total int64
	for b, c := range counts {
		out[b] = float64(c) / width[b]
		total += c
	}
	return out, total
}

func maxOf(xs ...[]float64) float64 {
	m := 0.0
	for _, s := range xs {
		for _, v := range s {
			if !math.IsNaN(v) {
				m = math.Max(m, v)
			}
		}
	}
	return m
}

// classPanels is one small chart per class: offered and admitted rate
// against the class's quota.
func classPanels(res *Result) string {
	var sb strings.Builder
	nb := len(res.Series.RoundTrips)
	mid, width := bucketTimes(res, nb)
	for ci, c := range res.Classes {
		off, _ := rates(res.Series.ClassOffered[ci], width)
		adm, total := rates(res.Series.ClassAdmitted[ci], width)
		deg, degTotal := rates(res.Series.ClassDegraded[ci], width)
		quota := c.Rate * float64(c.Tenants)
		p := newPlot(360, 220)
		p.L, p.R = 50, 10
		col := tierColor[c.Tier]
		p.addLegend("offered", colorOffered, "2 2", 1.2)
		p.addLegend("admitted", col, "", 1.8)
		p.addLegend("quota", colorQuota, "6 3", 1.5)
		if degTotal > 0 {
			p.addLegend("admitted without lease", colorDegraded, "", 1.5)
		}
		p.layout(fmt.Sprintf("%s (%d × %s/s)", c.Name, c.Tenants, group(int64(c.Rate))))
		xt := timeAxis(p, res)
		yt, ytop := niceTicks(0, math.Max(maxOf(off, adm, deg), quota*1.2), 4)
		p.Y0, p.Y1 = 0, ytop
		drawEvents(p, res)
		p.axes("time (s)", "requests/s", xt, yt, fmtSec, fmtNum)
		p.line(mid, off, colorOffered, 1.2, "2 2", `class="offered"`)
		p.line([]float64{0, res.Run.Seconds()}, []float64{quota, quota}, colorQuota, 1.5, "6 3", `class="quota"`)
		if degTotal > 0 {
			p.line(mid, deg, colorDegraded, 1.5, "", fmt.Sprintf(`class="degraded" data-total="%d"`, degTotal))
		}
		p.line(mid, adm, col, 1.8, "", fmt.Sprintf(`class="admitted" data-class="%s" data-total="%d"`, esc(c.Name), total))
		sb.WriteString(p.svg("panel-" + strings.ReplaceAll(c.Name, "/", "-")))
	}
	return sb.String()
}

// shareChart stacks each instance's share of the admissions over time.
func shareChart(res *Result) string {
	nb := len(res.Series.RoundTrips)
	mid, _ := bucketTimes(res, nb)
	ns := len(res.Series.SlotAdmitted)
	totals := make([]float64, nb)
	for s := 0; s < ns; s++ {
		for b := 0; b < nb; b++ {
			totals[b] += float64(res.Series.SlotAdmitted[s][b])
		}
	}
	p := newPlot(1080, 300)
	for s := 0; s < ns; s++ {
		label := fmt.Sprintf("instance %d", s)
		sl := res.Slots[s]
		switch {
		case sl.Start > 0:
			label += fmt.Sprintf(" (started at %.1fs)", sl.Start.Seconds())
		case sl.Stop < res.Run:
			label += fmt.Sprintf(" (closed at %.1fs)", sl.Stop.Seconds())
		}
		p.addLegendArea(label, slotColor[s%len(slotColor)])
	}
	p.layout("Share of admitted requests per instance")
	xt := timeAxis(p, res)
	p.Y0, p.Y1 = 0, 100
	lo := make([]float64, nb)
	for s := 0; s < ns; s++ {
		hi := make([]float64, nb)
		for b := 0; b < nb; b++ {
			share := 0.0
			if totals[b] > 0 {
				share = 100 * float64(res.Series.SlotAdmitted[s][b]) / totals[b]
			}
			hi[b] = lo[b] + share
		}
		var total int64
		for _, v := range res.Series.SlotAdmitted[s] {
			total += v
		}
		p.area(mid, lo, hi, slotColor[s%len(slotColor)], fmt.Sprintf(`class="share" data-slot="%d" data-total="%d"`, s, total))
		lo = hi
	}
	p.axes("time (s)", "share of admitted requests (%)", xt, []float64{0, 25, 50, 75, 100}, fmtSec, fmtNum)
	// Events on top of the areas, as outlines.
	for _, e := range res.Events {
		switch e.Kind {
		case "hot":
			if e.From > 0 {
				p.marker(e.From.Seconds(), e.Label)
			}
		default:
			a, b := p.px(e.From.Seconds()), p.px(e.To.Seconds())
			p.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#000" fill-opacity="0.12" stroke="#333" stroke-dasharray="4 3"/>`, a, p.T, b-a, p.H-p.T-p.B)
			p.printf(`<text x="%.1f" y="%.1f" class="band" style="fill:#111">%s</text>`, a+3, p.T+12, esc(bandLabel(e)))
		}
	}
	return p.svg("chart-share-svg")
}

func bandLabel(e event) string {
	switch e.Kind {
	case "stopped":
		return "1 instance down"
	case "off":
		return fmt.Sprintf("%d idle", onOffSlot)
	}
	return e.Label
}

// leaseChart plots the mean lease size per instance, per class, on a log
// axis.
func leaseChart(res *Result) string {
	nb := len(res.Series.RoundTrips)
	mid, _ := bucketTimes(res, nb)
	p := newPlot(1080, 340)
	for _, c := range res.Classes {
		p.addLegend(c.Name, tierColor[c.Tier], patDash[c.Pattern], 1.6)
	}
	p.layout("Lease size the syncer aims for, mean per instance")
	xt := timeAxis(p, res)
	lo, hi := math.Inf(1), 0.0
	for _, s := range res.Series.ClassLease {
		for _, v := range s {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	p.YLog = true
	p.Y0 = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.1))))
	p.Y1 = math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
	drawEvents(p, res)
	p.axes("time (s)", "tokens per instance (log scale)", xt, logTicks(p.Y0, p.Y1), fmtSec, fmtNum)
	for ci, c := range res.Classes {
		ys := make([]float64, nb)
		for b, v := range res.Series.ClassLease[ci] {
			ys[b] = v
			if v <= p.Y0 && !math.IsNaN(v) {
				ys[b] = p.Y0
			}
		}
		p.lineAcross(mid, ys, tierColor[c.Tier], 1.6, patDash[c.Pattern], fmt.Sprintf(`class="lease" data-class="%s"`, esc(c.Name)))
	}
	return p.svg("chart-lease-svg")
}

// redisChart plots Redis round trips, lease script runs and failed lease
// calls per second.
func redisChart(res *Result) string {
	nb := len(res.Series.RoundTrips)
	mid, width := bucketTimes(res, nb)
	rt, total := rates(res.Series.RoundTrips, width)
	sc, _ := rates(res.Series.Scripts, width)
	er, _ := rates(res.Series.Errors, width)
	p := newPlot(1080, 300)
	p.addLegend("round trips (a pipeline counts once)", "#1f77b4", "", 2)
	p.addLegend("lease script runs (one per tenant, batched or not)", "#9467bd", "5 3", 1.4)
	p.addLegend("failed lease calls", "#d62728", "", 1.4)
	p.layout("Redis traffic of all instances")
	xt := timeAxis(p, res)
	yt, ytop := niceTicks(0, math.Max(maxOf(rt, sc, er), 1), 5)
	p.Y0, p.Y1 = 0, ytop
	drawEvents(p, res)
	p.axes("time (s)", "per second", xt, yt, fmtSec, fmtNum)
	p.line(mid, sc, "#9467bd", 1.4, "5 3", `class="scripts"`)
	p.line(mid, er, "#d62728", 1.4, "", `class="errors"`)
	p.line(mid, rt, "#1f77b4", 2, "", fmt.Sprintf(`class="roundtrips" data-total="%d"`, total))
	return p.svg("chart-redis-svg")
}

// costCharts plots Redis's work over time: its CPU (INFO cpu, as a share
// of one core; only on a real server) and the script runs per second,
// each beside the per-request limiter's mean over its own run.
func costCharts(res *Result) string {
	nb := len(res.Series.Evals)
	mid, width := bucketTimes(res, nb)
	b := res.Baseline
	var sb strings.Builder
	if cpu := res.Series.RedisCPU; cpu != nil {
		ys := make([]float64, nb)
		for i := range ys {
			ys[i] = 100 * cpu[i] / width[i]
		}
		var base float64
		hasBase := b != nil && b.HasCPU && b.Duration > 0
		if hasBase {
			base = 100 * b.RedisCPU.Seconds() / b.Duration.Seconds()
		}
		p := newPlot(530, 260)
		p.addLegend("leasequota", colorLease, "", 2)
		if hasBase {
			p.addLegend("per-request limiter (mean of its run)", colorBase, "6 4", 1.4)
		}
		p.layout("Redis CPU (INFO cpu, % of one core)")
		xt := timeAxis(p, res)
		yt, ytop := niceTicks(0, math.Max(math.Max(maxOf(ys), base), 1), 5)
		p.Y0, p.Y1 = 0, ytop
		drawEvents(p, res)
		p.axes("time (s)", "% of a core", xt, yt, fmtSec, fmtNum)
		if hasBase {
			p.line([]float64{p.X0, p.X1}, []float64{base, base}, colorBase, 1.4, "6 4", `class="base-cpu"`)
		}
		p.line(mid, ys, colorLease, 2, "", fmt.Sprintf(`class="cpu" data-total-ms="%.0f"`, res.Total.RedisCPU.Seconds()*1e3))
		sb.WriteString(p.svg("chart-cpu-svg"))
	}
	ev, total := rates(res.Series.Evals, width)
	var base float64
	if b != nil && b.Duration > 0 {
		base = float64(b.Scripts) / b.Duration.Seconds()
	}
	p := newPlot(530, 260)
	p.addLegend("leasequota", colorLease, "", 2)
	if b != nil {
		p.addLegend("per-request limiter (mean of its run)", colorBase, "6 4", 1.4)
	}
	p.layout("Redis script runs per second (EVAL, EVALSHA)")
	xt := timeAxis(p, res)
	yt, ytop := niceTicks(0, math.Max(math.Max(maxOf(ev), base), 1), 5)
	p.Y0, p.Y1 = 0, ytop
	drawEvents(p, res)
	p.axes("time (s)", "per second", xt, yt, fmtSec, fmtNum)
	if b != nil {
		p.line([]float64{p.X0, p.X1}, []float64{base, base}, colorBase, 1.4, "6 4", `class="base-scripts"`)
	}
	p.line(mid, ev, colorLease, 2, "", fmt.Sprintf(`class="evals" data-total="%d"`, total))
	sb.WriteString(p.svg("chart-scripts-svg"))
	return sb.String()
}

// baselineCharts draws the comparison with the per-request limiter as
// pairs of bars.
func baselineCharts(res *Result) string {
	b := res.Baseline
	if b == nil {
		return ""
	}
	t := res.Total
	lqRT := float64(t.RoundTrips) / res.workload().Seconds() // as baselineRows
	bRT := float64(b.RoundTrips) / b.Duration.Seconds()
	var sb strings.Builder
	sb.WriteString(barPanel("bar-per1k", "Redis round trips per 1,000 decisions (log scale)", t.RoundTripsPer1k, b.RoundTripsPer1k, true,
		func(v float64) string { return fmt.Sprintf("%.1f", v) }, fmtNum))
	if lq, ok := t.CPUPerDecision(); ok {
		if base, ok := b.CPUPerDecision(); ok && lq > 0 && base > 0 {
			sb.WriteString(barPanel("bar-cpu", "Redis CPU per decision (log scale)", lq, base, true, fmtNanos, fmtNanos))
		}
	}
	sb.WriteString(barPanel("bar-p99", "Decision latency p99 (log scale)", float64(t.P99), float64(b.P99), true,
		func(v float64) string { return fmtDur(time.Duration(v)) }, func(v float64) string { return fmtDur(time.Duration(v)) }))
	sb.WriteString(barPanel("bar-roundtrips", "Redis round trips per second", lqRT, bRT, false, perSec, fmtNum))
	return sb.String()
}

// barPanel is two horizontal bars, leasequota and the baseline, with
// their values.
func barPanel(id, title string, lq, base float64, log bool, f, tickFmt func(float64) string) string {
	p := newPlot(530, 130)
	p.L, p.R, p.B = 100, 90, 24
	p.layout(title)
	hi := math.Max(lq, base)
	var ticks []float64
	var xfmt func(float64) string
	if log {
		lo := math.Max(math.Min(lq, base), 1e-9)
		p.X0 = math.Pow(10, math.Floor(math.Log10(lo)))
		p.X1 = math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
		ticks = logTicks(p.X0, p.X1)
		xfmt = tickFmt
	} else {
		ticks, p.X1 = niceTicks(0, math.Max(hi, 1), 4)
		xfmt = fmtNum
	}
	x := func(v float64) float64 {
		if log {
			v = math.Max(v, p.X0)
			return p.L + (math.Log10(v)-math.Log10(p.X0))/(math.Log10(p.X1)-math.Log10(p.X0))*(p.W-p.L-p.R)
		}
		return p.px(v)
	}
	y0 := p.H - p.B
	p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/>`, p.L, y0, p.W-p.R, y0)
	for _, t := range ticks {
		px := x(t)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, px, p.T, px, y0)
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle" class="tick">%s</text>`, px, y0+14, esc(xfmt(t)))
	}
	bars := []struct {
		name  string
		v     float64
		color string
	}{{"leasequota", lq, colorLease}, {"per-request", base, colorBase}}
	for i, bar := range bars {
		y := p.T + 6 + float64(i)*34
		w := math.Max(x(bar.v)-p.L, 1)
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="end" class="legend">%s</text>`, p.L-6, y+16, bar.name)
		p.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="24" fill="%s" class="bar" data-value="%g"/>`, p.L, y, w, bar.color, bar.v)
		p.printf(`<text x="%.1f" y="%.1f" class="value">%s</text>`, p.L+w+5, y+16, esc(f(bar.v)))
	}
	return p.svg(id)
}

var reportTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222; margin: 24px auto; max-width: 1120px; padding: 0 16px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 6px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.sub, p.note, figcaption { color: #555; }
p.note, figcaption { font-size: 13px; max-width: 1080px; }
.verdict { padding: 10px 14px; border-radius: 6px; margin: 14px 0; font-weight: 600; }
.verdict.ok { background: #e6f4ea; border: 1px solid #9bd3ae; }
.verdict.bad { background: #fce8e6; border: 1px solid #f1a7a0; }
.verdict div + div { font-weight: 400; }
.verdict div { white-space: pre-wrap; }
.kpis { display: flex; gap: 12px; flex-wrap: wrap; margin: 10px 0; }
.kpi { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 120px; max-width: 230px; }
.kpi b { display: block; font-size: 20px; }
.kpi span { color: #555; font-size: 12px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; }
th { text-align: right; background: #f6f6f6; }
td { text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.total td { font-weight: 600; border-top: 2px solid #ccc; }
figure { margin: 8px 0; }
.grid { display: grid; grid-template-columns: repeat(3, 360px); gap: 4px 6px; }
.bars { display: grid; grid-template-columns: repeat(2, 530px); gap: 4px 12px; }
code { white-space: nowrap; }
svg text { font-family: inherit; fill: #333; }
svg .title { font-size: 13px; font-weight: 600; }
svg .tick { font-size: 11px; fill: #555; }
svg .axis { font-size: 12px; fill: #444; }
svg .legend { font-size: 11.5px; }
svg .band { font-size: 11px; fill: #7a2e26; }
svg .value { font-size: 12px; font-weight: 600; }
dl { font-size: 13px; } dt { font-weight: 600; margin-top: 6px; } dd { margin-left: 16px; color: #444; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="sub">{{.Help}}.<br>{{.Params}}. Started {{.Started}}.</p>

<section id="summary">
<div class="verdict {{if .OK}}ok{{else}}bad{{end}}">{{range .Verdict}}<div>{{.}}</div>{{end}}</div>
<div class="kpis">{{range .KPIs}}<div class="kpi"><b>{{.Value}}</b><span>{{.Label}}</span></div>{{end}}</div>
{{if .Fleet}}<table id="fleet-table">
<thead><tr><th></th><th>leasequota</th><th>per-request</th><th>leasequota / per-request</th></tr></thead>
<tbody>{{range .Fleet}}<tr><td>{{.Name}}</td><td>{{.Lease}}</td><td>{{.Base}}</td><td>{{.Ratio}}</td></tr>
{{end}}</tbody></table>
<p class="note">The fleet shape of issue #15: every tenant has Rate 100 and Burst 100 and is offered more than its quota, evenly over the instances. Redis CPU is INFO cpu (user + system) of the server during each run, every client included; the per-request limiter ran the same load after the simulation, on the same Redis. Script runs are the EVAL and EVALSHA calls sent. Utilization is admitted (with a lease) over the sum of the tenants' Burst + Rate·T.</p>{{end}}
</section>

<h2>Per tenant class</h2>
<table id="class-table">
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- $cols := .Cols}}
{{range $i, $r := .Rows}}<tr data-class="{{$r.Name}}"{{if eq $r.Name "all"}} class="total"{{end}}>{{range $j, $v := $r.Cells}}<td data-col="{{index $cols $j}}">{{$v}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
<p class="note">A class is the tenants of one quota tier (large, medium, small) and one demand pattern: <b>over</b> asks for 3x its quota, <b>under</b> for half of it, <b>bursty</b> for 6x during one second out of two.
<b>quota/s</b> and <b>burst</b> are per tenant (the <i>all</i> row: the sum of the rates). <b>offered/s</b> is the requests made per second.
<b>admitted</b> counts requests admitted with leased tokens. <b>bound</b> is the sum over the class's tenants of Burst + Rate·T, with T = {{.BoundT}} s from the start to the moment the last request was decided (Close excluded: no request is admitted in it): no tenant may exceed its own.
<b>util</b> is admitted divided by what one exact token bucket per tenant would have admitted of the same requests; above 100% means leases held through an idle gap were spent as extra burst (still within the bound).
<b>over</b> is admissions above the bound. <b>degraded</b> counts decisions made by the failure mode while Redis was unreachable and the lease spent (admitted without a lease, or denied).
<b>lease</b> is the mean lease size per instance in tokens; <b>calls/1k</b> is lease script runs for the class's tenants per 1,000 of their decisions (many tenants share one pipelined round trip).
<b>p50/p99</b> are AllowN latencies from a sample of decisions; for low-rate classes the p99 includes the first request on each instance, which waits for the tenant's first lease (cold start).</p>

{{with .Account}}<h2>Where the tokens of Burst + Rate·T went (issue #16)</h2>
<table id="account-table">
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr data-class="{{index . 0}}"{{if eq (index . 0) "all"}} class="total"{{end}}>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody></table>
<table id="account-diag-table">
<thead><tr>{{range .DiagHeader}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .DiagRows}}<tr data-class="{{index . 0}}">{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody></table>
<p class="note">T = {{.T}} s, the workload (the final Close is not in it). The first table is in % of the class's Burst + Rate·T, and its columns after B+r·T add up to 100%.
{{range .Notes}}{{.}} {{end}}</p>
{{end}}
<h2>Per instance</h2>
<table id="instance-table">
<thead><tr><th>instance</th><th>active</th><th>offered</th><th>admitted</th><th>admitted %</th><th>over-quota tenants, 1st half</th><th>2nd half</th></tr></thead>
<tbody>{{range .Insts}}<tr><td>{{.Name}}</td><td>{{.Active}}</td><td>{{.Offered}}</td><td>{{.Admitted}}</td><td>{{.AdmitPct}}</td><td>{{.Over1}}</td><td>{{.Over2}}</td></tr>
{{end}}</tbody></table>
<p class="note">Admissions with or without a lease. The last two columns are the share of the over-quota tenants' requests admitted on each instance, in each half of the run: a single global limiter would admit the same share everywhere, whichever instance a request reaches.</p>

<h2>Admitted rate against quota, per class</h2>
<figure id="chart-admitted">
<div class="grid">{{.Admitted}}</div>
<figcaption>Requests per second of all instances, in buckets of {{.Step}}. Admitted (solid) stays at or under the class's summed quota (dashed red) once the initial burst is spent, wherever demand (dotted grey) is above it.</figcaption>
</figure>

<h2>Share of admissions per instance</h2>
<figure id="chart-share">
{{.Share}}
<figcaption>Each band is one instance's share of the admitted requests (with or without a lease) in a bucket of {{.Step}}. Quotas are global: an instance that receives more traffic leases more of them.</figcaption>
</figure>

<h2>Lease size</h2>
<figure id="chart-lease">
{{.Lease}}
<figcaption>Mean lease size per instance that the syncer aims for, per class (tokens, log scale): recent demand on the instance times the refresh interval times the headroom, between MinLease and MaxLease (Burst/2). Idle tenants aim for no lease (drawn at the bottom of the axis).</figcaption>
</figure>

<h2>Redis traffic</h2>
<figure id="chart-redis">
{{.Redis}}
<figcaption>Per second, all instances. The syncer refreshes every tenant's lease on a schedule and pipelines the tenants due at the same time into one round trip, so Redis traffic follows the number of tenants and instances, not the request rate.</figcaption>
</figure>

<h2>Redis cost over time</h2>
<figure id="chart-cost">
<div class="bars">{{.Cost}}</div>
{{if .CPUNote}}<p class="note">{{.CPUNote}}</p>{{end}}
<figcaption>In buckets of {{.Step}}: the Redis server's CPU time (INFO cpu, user + system, sampled every bucket; every client of the server counts) as a share of one core, and the script runs (EVAL, EVALSHA) the instances sent, per second. The dashed lines are the per-request limiter's means over its own run of the same load, when it ran.</figcaption>
</figure>

<h2>Against a per-request Redis limiter</h2>
<figure id="chart-baseline">
{{if .BaseRows}}<div class="bars">{{.Baseline}}</div>
<table id="baseline-table">
<thead><tr><th></th><th>leasequota</th><th>per-request</th><th>leasequota is</th></tr></thead>
<tbody>{{range .BaseRows}}<tr><td>{{.Name}}</td><td>{{.Lease}}</td><td>{{.Base}}</td><td>{{.Ratio}}</td></tr>
{{end}}</tbody></table>
<figcaption>The per-request limiter is {{.Res.Baseline.Name}}: every decision is one script call to the same Redis. It ran the steady form of the workload for {{printf "%.1f" .Res.Baseline.Duration.Seconds}} s with the same instances, each with {{.Consumers}} goroutines calling it; requests that found an instance's queue full were shed.
What leasing changes is the Redis work per decision (round trips and, on a real redis-server, CPU time from INFO cpu, which counts every client of the server) and the decision latency. Both limiters were offered the same workload, so decided/s is the offered load whenever a limiter keeps up: it is not a capacity.{{if .Embedded}} The embedded Redis starts a Lua interpreter for every script call, far slower than redis-server: there the per-request limiter sheds requests, its latency includes queueing, and Redis CPU cannot be read. The round trips per decision hold on any Redis; run with <code>-redis</code> for latency and CPU on a real server.{{end}}</figcaption>
{{else}}<p class="note">The baseline was skipped (-baseline 0).</p>{{end}}
</figure>

<section id="limiter-log">
<h2>Limiter log</h2>
{{if .Logs}}<table id="log-table">
<thead><tr><th>time</th><th>instance</th><th>level</th><th>message</th></tr></thead>
<tbody>{{range .Logs}}<tr><td>{{.At}}</td><td>{{.Instance}}</td><td>{{.Level}}</td><td style="text-align:left">{{.Text}}</td></tr>
{{end}}</tbody></table>{{if .Dropped}}<p class="note">{{.Dropped}} more lines were not kept.</p>{{end}}
{{else}}<p class="note">The limiters logged nothing at level INFO or above.</p>{{end}}
</section>

<h2>How to read this</h2>
<dl>
<dt>The bound</dt><dd>For every tenant, admissions over the run are at most Burst + Rate·T, and in any window of length W at most Burst + Rate·(W + L), with L the lease TTL plus, with reservations, their length and a second ({{.WindowL}}). Both are checked on every tenant; the run exits with status 1 if one fails. Admissions without a lease (degraded modes) would be counted apart and are not covered by the bound.</dd>
<dt>Degraded</dt><dd>When Redis cannot be reached, an instance spends the leases it holds; then the tenant's failure mode decides (fail_local: a local token bucket; fail_closed: deny; fail_open: admit). Those decisions are counted as degraded; their admissions are outside the bound.</dd>
<dt>Round trip</dt><dd>One request to Redis and its reply; a pipeline of many tenants' lease calls counts once, as in the limiter's Stats.Calls.</dd>
<dt>Redis CPU</dt><dd>The CPU time (user + system) the Redis server used during a run, from INFO cpu before and after it (summed over the masters of a cluster), divided by the decisions made. It counts every client of the server. The embedded Redis runs inside the simulator and reports none (n/a).</dd>
</dl>
</body>
</html>
`))
