// Command benchtable reads the output of the integration module's
// comparison benchmarks (BenchmarkCompare, BenchmarkCompareParallel,
// BenchmarkCompareClosedLoop; compare_bench_test.go) on stdin and prints
// issue #16's table: one row per limiter, the median of each figure over
// the runs (-count), and under it the ratios #16 names, as measured.
//
//	cd integration && go test -run '^$' -bench BenchmarkCompare -benchmem -count 3 . | go run ./cmd/benchtable
//
// With -echo it copies its input to stdout as it reads it, the table
// after. It exits with status 1 when the input has no comparison line or
// reports a failure (a line starting FAIL or panic:, or with --- FAIL),
// after printing what it has. Under the table it names the limiters that
// denied decisions (the benchmarks' denied/1k-dec), with the most of any
// run.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The families of compare_bench_test.go.
const (
	familySerial   = "BenchmarkCompare"
	familyParallel = "BenchmarkCompareParallel"
	familyLoop     = "BenchmarkCompareClosedLoop"
)

// The limiters the ratios under the table name: leasequota is Allow, the
// hot path issue #16 measures, and withDecision AllowN, which builds the
// Decision too.
const (
	baseline     = "leasequota"
	withDecision = "leasequota-AllowN"
	localRate    = "xtimerate-keyed"
	redisRate    = "redis_rate"
)

// Goals of issue #16, printed beside the measured ratios for reference.
const (
	goalLocalRatio = 0.12
	goalLoopRatio  = 150
)

// benchLineRE matches a result line: name, GOMAXPROCS suffix, iterations,
// then value-unit pairs.
var benchLineRE = regexp.MustCompile(`^(BenchmarkCompare(?:Parallel|ClosedLoop)?)/(\S+?)(?:-(\d+))?\s+\d+\s+(.*)$`)

func main() {
	echo := flag.Bool("echo", false, "copy the input to stdout as it is read, the table after it")
	flag.Parse()
	var copyTo io.Writer
	if *echo {
		copyTo = os.Stdout
	}
	if err := run(os.Stdin, copyTo, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// results holds, per family and limiter, the metrics of each run.
type results struct {
	limiters []string                                   // in order of first appearance
	runs     map[string]map[string][]map[string]float64 // family -> limiter -> runs -> unit -> value
	failed   bool
	procs    string // GOMAXPROCS, from the names' suffix; "" if none
}

// run reads benchmark output from r (copying it to echo when not nil)
// and writes the table to w.
func run(r io.Reader, echo io.Writer, w io.Writer) error {
	res, err := parse(r, echo)
	if err != nil {
		return err
	}
	if len(res.limiters) == 0 {
		return errors.New("no BenchmarkCompare result in the input")
	}
	if echo != nil {
		fmt.Fprintln(w)
	}
	if err := res.write(w); err != nil {
		return err
	}
	if res.failed {
		return errors.New("the benchmark run failed (see its output)")
	}
	return nil
}

func parse(r io.Reader, echo io.Writer) (*results, error) {
	res := &results{runs: map[string]map[string][]map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if echo != nil {
			if _, err := fmt.Fprintln(echo, line); err != nil {
				return nil, err
			}
		}
		trimmed := strings.TrimSpace(line)
		// A failed sub-benchmark's "--- FAIL" follows its name on the line.
		if strings.HasPrefix(trimmed, "FAIL") || strings.Contains(line, "--- FAIL") || strings.HasPrefix(trimmed, "panic:") {
			res.failed = true
		}
		m := benchLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		family, limiter := m[1], m[2]
		if m[3] != "" {
			res.procs = m[3]
		}
		metrics, err := parseMetrics(m[4])
		if err != nil {
			return nil, fmt.Errorf("%q: %v", line, err)
		}
		if res.runs[family] == nil {
			res.runs[family] = map[string][]map[string]float64{}
		}
		res.runs[family][limiter] = append(res.runs[family][limiter], metrics)
		if !slices.Contains(res.limiters, limiter) {
			res.limiters = append(res.limiters, limiter)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// The baseline first, the others as they came.
	if i := slices.Index(res.limiters, baseline); i > 0 {
		res.limiters = slices.Insert(slices.Delete(res.limiters, i, i+1), 0, baseline)
	}
	return res, nil
}

// parseMetrics parses "12.3 ns/op  0 B/op  ..." into unit -> value.
func parseMetrics(s string) (map[string]float64, error) {
	f := strings.Fields(s)
	if len(f)%2 != 0 {
		return nil, fmt.Errorf("odd number of fields in %q", s)
	}
	m := make(map[string]float64, len(f)/2)
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil, err
		}
		m[f[i+1]] = v
	}
	return m, nil
}

// median returns the median of unit over the runs of limiter in family
// (the mean of the middle two for an even count), and whether any run
// reported it.
func (r *results) median(family, limiter, unit string) (float64, bool) {
	var vs []float64
	for _, run := range r.runs[family][limiter] {
		if v, ok := run[unit]; ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], true
	}
	return (vs[n/2-1] + vs[n/2]) / 2, true
}

// column is one column of the table: a figure of one family.
type column struct {
	header, family, unit string
}

var columns = []column{
	{"ns/decision", familySerial, "ns/op"},
	{"allocs/op", familySerial, "allocs/op"},
	{"B/op", familySerial, "B/op"},
	{"Redis calls/1k", familySerial, "redis-calls/1k-dec"},
	{"Redis cmds/1k", familySerial, "redis-cmds/1k-dec"},
	{"Redis CPU µs/1k", familySerial, "redis-cpu-µs/1k-dec"},
	{"ns/decision, RunParallel", familyParallel, "ns/op"},
	{"closed-loop dec/s", familyLoop, "dec/s"},
}

func (r *results) write(w io.Writer) error {
	b := &strings.Builder{}
	head := []string{"limiter"}
	for _, c := range columns {
		head = append(head, c.header)
	}
	head = append(head, "ns/decision vs "+baseline)
	row(b, head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
	}
	row(b, sep)
	base, haveBase := r.median(familySerial, baseline, "ns/op")
	for _, l := range r.limiters {
		cells := []string{l}
		for _, c := range columns {
			cells = append(cells, r.cell(c.family, l, c.unit))
		}
		ratio := "-"
		if v, ok := r.median(familySerial, l, "ns/op"); ok && haveBase && base > 0 {
			ratio = formatNum(v/base) + "x"
		}
		cells = append(cells, ratio)
		row(b, cells)
	}
	fmt.Fprintf(b, "\nMedians of %d run(s) each; Redis figures per 1,000 decisions (calls: commands the limiter's client sent; cmds: commands Redis ran, those inside scripts included; CPU: INFO cpu user+sys); - where none applies.\n",
		len(r.runs[familySerial][baseline]))
	procs := ""
	if r.procs != "" {
		procs = " (GOMAXPROCS " + r.procs + ")"
	}
	fmt.Fprintf(b, "1,024 tenants, ns/decision %s (Allow) / %s: 1 goroutine %s, RunParallel%s %s; %s allocs/op %s (issue #16's goal: <= %sx, 0 allocs)\n",
		baseline, localRate,
		r.ratio(familySerial, baseline, localRate, "ns/op"), procs, r.ratio(familyParallel, baseline, localRate, "ns/op"),
		baseline, r.cell(familySerial, baseline, "allocs/op"), formatNum(goalLocalRatio))
	if slices.Contains(r.limiters, withDecision) {
		fmt.Fprintf(b, "%s / %s: 1 goroutine %s, RunParallel%s %s\n", withDecision, localRate,
			r.ratio(familySerial, withDecision, localRate, "ns/op"), procs, r.ratio(familyParallel, withDecision, localRate, "ns/op"))
	}
	for _, l := range r.limiters {
		if most, family := r.most(l, "denied/1k-dec"); most > 0 {
			fmt.Fprintf(b, "%s denied decisions: up to %s per 1,000 in a run (%s)\n", l, formatNum(most), family)
		}
	}
	fmt.Fprintf(b, "closed loop, 64 goroutines, %s dec/s / %s dec/s (denials included): %s (issue #16's goal: >= %sx)\n",
		baseline, redisRate, r.ratio(familyLoop, baseline, redisRate, "dec/s"), formatNum(goalLoopRatio))
	_, err := io.WriteString(w, b.String())
	return err
}

// most is the largest value of unit in any run of limiter, of any
// family, and that run's family.
func (r *results) most(limiter, unit string) (float64, string) {
	var most float64
	var family string
	for _, f := range []string{familySerial, familyParallel, familyLoop} {
		for _, run := range r.runs[f][limiter] {
			if v := run[unit]; v > most {
				most, family = v, f
			}
		}
	}
	return most, family
}

// cell is the median of a figure, formatted, or "-".
func (r *results) cell(family, limiter, unit string) string {
	v, ok := r.median(family, limiter, unit)
	if !ok {
		return "-"
	}
	return formatNum(v)
}

// ratio is a's median over b's, formatted with an x, or "-".
func (r *results) ratio(family, a, b, unit string) string {
	va, okA := r.median(family, a, unit)
	vb, okB := r.median(family, b, unit)
	if !okA || !okB || vb == 0 {
		return "-"
	}
	return formatNum(va/vb) + "x"
}

func row(b *strings.Builder, cells []string) {
	b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// formatNum prints v with about three significant digits (whole numbers
// below 1,000 as they are), from 1,000 up rounded to a whole number with
// thousands separated.
func formatNum(v float64) string {
	switch a := max(v, -v); {
	case a == 0:
		return "0"
	case a < 1000 && v == float64(int64(v)):
		return strconv.FormatInt(int64(v), 10)
	case a < 1:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a < 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
