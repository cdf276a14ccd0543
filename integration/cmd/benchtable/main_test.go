package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden formats testdata/compare.txt, the captured output of
// `go test -run '^$' -bench BenchmarkCompare -benchmem -count 3 .`
// in the integration module, and compares the table with
// testdata/compare.golden (go test -run TestGolden -update rewrites it).
func TestGolden(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "compare.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(bytes.NewReader(in), nil, &out); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "compare.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(want) {
		t.Errorf("table differs from %s:\n got:\n%s\nwant:\n%s", golden, got, want)
	}
}

// sample is a small run of three counts with round figures, so that the
// medians and ratios can be checked by hand.
const sample = `goos: linux
BenchmarkCompare/xtimerate-keyed-2    	 100	       200 ns/op	       0 B/op	       0 allocs/op
BenchmarkCompare/leasequota-2         	 100	        40 ns/op	         0.5 redis-calls/1k-dec	         30 redis-cmds/1k-dec	         12 redis-cpu-µs/1k-dec	       0 B/op	       0 allocs/op
BenchmarkCompare/redis_rate-2         	 100	     40000 ns/op	      1000 redis-calls/1k-dec	      3000 redis-cmds/1k-dec	     20000 redis-cpu-µs/1k-dec	     696 B/op	      22 allocs/op
BenchmarkCompare/xtimerate-keyed-2    	 100	       400 ns/op	       0 B/op	       0 allocs/op
BenchmarkCompare/leasequota-2         	 100	        90 ns/op	         0.5 redis-calls/1k-dec	         30 redis-cmds/1k-dec	         12 redis-cpu-µs/1k-dec	       0 B/op	       0 allocs/op
BenchmarkCompare/redis_rate-2         	 100	     40000 ns/op	      1000 redis-calls/1k-dec	      3000 redis-cmds/1k-dec	     20000 redis-cpu-µs/1k-dec	     696 B/op	      22 allocs/op
BenchmarkCompare/xtimerate-keyed-2    	 100	       300 ns/op	       0 B/op	       0 allocs/op
BenchmarkCompare/leasequota-2         	 100	        30 ns/op	         0.5 redis-calls/1k-dec	         30 redis-cmds/1k-dec	         12 redis-cpu-µs/1k-dec	       0 B/op	       0 allocs/op
BenchmarkCompare/redis_rate-2         	 100	     40000 ns/op	      1000 redis-calls/1k-dec	      3000 redis-cmds/1k-dec	     20000 redis-cpu-µs/1k-dec	     696 B/op	      22 allocs/op
BenchmarkCompareParallel/leasequota-2 	 100	        25 ns/op	         2.5 denied/1k-dec	       0 B/op	       0 allocs/op
BenchmarkCompareParallel/xtimerate-keyed-2 	 100	       250 ns/op	       0 B/op	       0 allocs/op
BenchmarkCompareClosedLoop/leasequota-2 	 100	       100 ns/op	   5000000 dec/s	       0 B/op	       0 allocs/op
BenchmarkCompareClosedLoop/redis_rate-2 	 100	     50000 ns/op	     20000 dec/s	     870 B/op	      22 allocs/op
PASS
`

func TestMediansAndRatios(t *testing.T) {
	var out bytes.Buffer
	if err := run(strings.NewReader(sample), nil, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "xtimerate-keyed denied") || strings.Contains(got, "redis_rate denied") {
		t.Errorf("a limiter without denials is said to deny:\n%s", got)
	}
	for _, want := range []string{
		// leasequota first though it came second; medians of 40, 90, 30
		// and of 200, 400, 300; no closed-loop run of xtimerate-keyed.
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n| leasequota | 40 | 0 | 0 | 0.5 | 30 | 12 | 25 | 5,000,000 | 1x |\n",
		"| xtimerate-keyed | 300 | 0 | 0 | - | - | - | 250 | - | 7.50x |\n",
		"| redis_rate | 40,000 | 22 | 696 | 1,000 | 3,000 | 20,000 | - | 20,000 | 1,000x |\n",
		"Medians of 3 run(s) each",
		"1 goroutine 0.133x, RunParallel (GOMAXPROCS 2) 0.1x; leasequota allocs/op 0 ",
		"leasequota dec/s / redis_rate dec/s (denials included): 250x ",
		"leasequota denied decisions: up to 2.50 per 1,000 in a run (BenchmarkCompareParallel)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestEcho(t *testing.T) {
	var out bytes.Buffer
	if err := run(strings.NewReader(sample), &out, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasPrefix(got, sample) {
		t.Errorf("-echo: the output does not start with the input:\n%s", got)
	}
	if !strings.Contains(got[len(sample):], "| leasequota | 40 |") {
		t.Errorf("-echo: no table after the input:\n%s", got)
	}
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no BenchmarkCompare result"},
		{"other benchmarks only", "BenchmarkAllow-2  100  30 ns/op  0 B/op  0 allocs/op\nPASS\n", "no BenchmarkCompare result"},
		{"failed run", sample + "--- FAIL: BenchmarkCompare/redis_rate\nFAIL\n", "run failed"},
		{"failed sub-benchmark", sample + "BenchmarkCompareParallel/leasequota-2  \t--- FAIL: BenchmarkCompareParallel/leasequota-2\nPASS\n", "run failed"},
		{"panic", sample + "panic: boom\n", "run failed"},
		{"bad metrics", "BenchmarkCompare/leasequota-2  100  30 ns/op  0\n", "odd number of fields"},
	} {
		var out bytes.Buffer
		err := run(strings.NewReader(tc.in), nil, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
	// A failed run still prints what it has.
	var out bytes.Buffer
	run(strings.NewReader(sample+"FAIL\n"), nil, &out)
	if !strings.Contains(out.String(), "| leasequota | 40 |") {
		t.Errorf("failed run: no table:\n%s", out.String())
	}
}

func TestFormatNum(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {0.0036, "0.0036"}, {0.125, "0.125"}, {0.12349, "0.123"}, {0.5, "0.5"}, {1, "1"}, {2.104, "2.10"}, {22, "22"},
		{64.96, "65.0"}, {179.8, "180"}, {999, "999"}, {1000, "1,000"}, {57655.4, "57,655"},
		{7278534, "7,278,534"}, {-1234567, "-1,234,567"},
	} {
		if got := formatNum(tc.v); got != tc.want {
			t.Errorf("formatNum(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
