package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// plot draws one chart as an SVG element: axes with ticks and labels, a
// legend, shaded bands and data series. Coordinates are data units;
// margins and the plot area are in pixels.
type plot struct {
	W, H       float64 // size of the SVG
	L, R, T, B float64 // margins around the plot area
	X0, X1     float64 // x range
	Y0, Y1     float64 // y range (for a log axis: positive)
	YLog       bool
	sb         strings.Builder
	legend     []legendItem
	legendY    []float64 // baseline of each legend item, set by layout
	legendX    []float64
	title      string
}

type legendItem struct {
	label, color, dash string
	width              float64
	area               bool // a filled swatch rather than a line
}

func newPlot(w, h float64) *plot {
	return &plot{W: w, H: h, L: 64, R: 16, T: 34, B: 42}
}

// legendRowH is the height of a legend row.
const legendRowH = 15

// layout places the title and the legend items (left to right, in rows
// under the title) and moves the plot area's top below them. Call it
// after the legend is complete and before drawing anything.
func (p *plot) layout(title string) {
	p.title = title
	y := 16.0
	if title != "" {
		y += 17
	}
	x := p.L
	p.legendX, p.legendY = nil, nil
	for _, it := range p.legend {
		w := 26 + 6.4*float64(len([]rune(it.label))) + 14
		if x+w > p.W-p.R && x > p.L {
			x, y = p.L, y+legendRowH
		}
		p.legendX = append(p.legendX, x)
		p.legendY = append(p.legendY, y)
		x += w
	}
	if len(p.legend) == 0 {
		y -= legendRowH
	}
	p.T = y + 12
}

func (p *plot) px(x float64) float64 {
	if p.X1 == p.X0 {
		return p.L
	}
	return p.L + (x-p.X0)/(p.X1-p.X0)*(p.W-p.L-p.R)
}

func (p *plot) py(y float64) float64 {
	lo, hi := p.Y0, p.Y1
	if p.YLog {
		y = math.Log10(math.Max(y, p.Y0))
		lo, hi = math.Log10(p.Y0), math.Log10(p.Y1)
	}
	if hi == lo {
		return p.H - p.B
	}
	y = math.Min(math.Max(y, lo), hi)
	return p.H - p.B - (y-lo)/(hi-lo)*(p.H-p.T-p.B)
}

func (p *plot) printf(format string, a ...any) { fmt.Fprintf(&p.sb, format, a...) }

// axes draws the frame, grid lines, ticks and axis labels.
func (p *plot) axes(xLabel, yLabel string, xTicks, yTicks []float64, xFmt, yFmt func(float64) string) {
	x0, x1 := p.L, p.W-p.R
	y0, y1 := p.H-p.B, p.T
	p.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#bbb"/>`, x0, y1, x1-x0, y0-y1)
	for _, t := range yTicks {
		y := p.py(t)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e6e6e6"/>`, x0, y, x1, y)
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="end" class="tick">%s</text>`, x0-5, y+4, esc(yFmt(t)))
	}
	for _, t := range xTicks {
		x := p.px(t)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, x, y0, x, y1)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/>`, x, y0, x, y0+4)
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle" class="tick">%s</text>`, x, y0+16, esc(xFmt(t)))
	}
	if xLabel != "" {
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle" class="axis">%s</text>`, (x0+x1)/2, p.H-6, esc(xLabel))
	}
	if yLabel != "" {
		p.printf(`<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle" class="axis">%s</text>`, 13.0, (y0+y1)/2, esc(yLabel))
	}
}

// band shades [x0, x1) over the plot's height, with a label at the top.
func (p *plot) band(x0, x1 float64, fill, label string) {
	a, b := p.px(math.Max(x0, p.X0)), p.px(math.Min(x1, p.X1))
	p.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, a, p.T, math.Max(b-a, 1), p.H-p.T-p.B, fill)
	if label != "" {
		p.printf(`<text x="%.1f" y="%.1f" class="band">%s</text>`, a+3, p.T+12, esc(label))
	}
}

// marker draws a vertical line at x with a label.
func (p *plot) marker(x float64, label string) {
	px := p.px(x)
	p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="3 3"/>`, px, p.T, px, p.H-p.B)
	p.printf(`<text x="%.1f" y="%.1f" class="band">%s</text>`, px+3, p.T+12, esc(label))
}

// line draws a series as a polyline, broken where y is NaN. attrs are
// extra attributes of each polyline (e.g. data-*).
func (p *plot) line(xs, ys []float64, color string, width float64, dash, attrs string) {
	p.drawLine(xs, ys, color, width, dash, attrs, true)
}

// lineAcross draws a series as one polyline that skips NaN points.
func (p *plot) lineAcross(xs, ys []float64, color string, width float64, dash, attrs string) {
	p.drawLine(xs, ys, color, width, dash, attrs, false)
}

func (p *plot) drawLine(xs, ys []float64, color string, width float64, dash, attrs string, breakAtNaN bool) {
	var pts []string
	flush := func() {
		if len(pts) > 0 {
			d := ""
			if dash != "" {
				d = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
			}
			p.printf(`<polyline fill="none" stroke="%s" stroke-width="%.1f"%s stroke-linejoin="round" %s points="%s"/>`,
				color, width, d, attrs, strings.Join(pts, " "))
		}
		pts = pts[:0]
	}
	for i := range xs {
		if math.IsNaN(ys[i]) {
			if breakAtNaN {
				flush()
			}
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.px(xs[i]), p.py(ys[i])))
	}
	flush()
}

// area fills between lo and hi (same xs) as one polygon.
func (p *plot) area(xs, lo, hi []float64, color, attrs string) {
	if len(xs) == 0 {
		return
	}
	var pts []string
	for i := range xs {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.px(xs[i]), p.py(hi[i])))
	}
	for i := len(xs) - 1; i >= 0; i-- {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.px(xs[i]), p.py(lo[i])))
	}
	p.printf(`<polygon fill="%s" stroke="none" %s points="%s"/>`, color, attrs, strings.Join(pts, " "))
}

func (p *plot) addLegend(label, color, dash string, width float64) {
	p.legend = append(p.legend, legendItem{label: label, color: color, dash: dash, width: width})
}

func (p *plot) addLegendArea(label, color string) {
	p.legend = append(p.legend, legendItem{label: label, color: color, area: true})
}

// svg returns the chart with the title and legend placed by layout, on
// a white plot area.
func (p *plot) svg(id string) string {
	var out strings.Builder
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`,
		esc(id), p.W, p.H, p.W, p.H, esc(p.title))
	fmt.Fprintf(&out, `<rect width="%.0f" height="%.0f" fill="#fff"/>`, p.W, p.H)
	if p.title != "" {
		fmt.Fprintf(&out, `<text x="%.1f" y="16" class="title">%s</text>`, p.L, esc(p.title))
	}
	for i, it := range p.legend {
		x, y := p.legendX[i], p.legendY[i]
		if it.area {
			fmt.Fprintf(&out, `<rect x="%.1f" y="%.1f" width="20" height="10" fill="%s"/>`, x, y-9, it.color)
		} else {
			d := ""
			if it.dash != "" {
				d = fmt.Sprintf(` stroke-dasharray="%s"`, it.dash)
			}
			fmt.Fprintf(&out, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`, x, y-4, x+20, y-4, it.color, math.Max(it.width, 2), d)
		}
		fmt.Fprintf(&out, `<text x="%.1f" y="%.1f" class="legend">%s</text>`, x+26, y, esc(it.label))
	}
	out.WriteString(p.sb.String())
	out.WriteString(`</svg>`)
	return out.String()
}

func esc(s string) string { return html.EscapeString(s) }

// niceTicks returns about n round tick values covering [lo, hi]:
// multiples of 1, 2 or 5 times a power of ten. It also returns the range
// rounded out to whole ticks.
func niceTicks(lo, hi float64, n int) (ticks []float64, top float64) {
	if !(hi > lo) {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(max(n, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	for v := start; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, v)
	}
	top = ticks[len(ticks)-1]
	if top < hi {
		top += step
		ticks = append(ticks, top)
	}
	return ticks, top
}

// logTicks returns the powers of ten in [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var t []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		v := math.Pow(10, e)
		if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
			t = append(t, v)
		}
	}
	return t
}

// fmtNum formats an axis value compactly: 1500 -> "1.5k", 2000000 -> "2M".
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case a >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a >= 10 || a == 0:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return trimZero(fmt.Sprintf("%.1f", v))
	default:
		return trimZero(fmt.Sprintf("%.2f", v))
	}
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func fmtSec(v float64) string { return trimZero(fmt.Sprintf("%.1f", v)) + "s" }
