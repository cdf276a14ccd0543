package redistest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// recordingTB is the part of a test that Logger uses, recording what is
// written to the test's output.
type recordingTB struct {
	testing.TB // nil: only the methods below may be called
	out        bytes.Buffer
	cleanups   []func()
}

func (r *recordingTB) Output() io.Writer { return &r.out }
func (r *recordingTB) Name() string      { return "TestRecorded" }
func (r *recordingTB) Cleanup(f func())  { r.cleanups = append(r.cleanups, f) }

// end runs the cleanups, as testing does when the test ends.
func (r *recordingTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// TestLogger logs from many goroutines at once: every Info and Warn
// record must reach the test's output as one whole line, Debug records
// none; after the test ended, records go to stderr with the test's name.
func TestLogger(t *testing.T) {
	tb := &recordingTB{}
	lg := Logger(tb).With("component", "syncer")
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				lg.Info("leasequota: leasing resumed", "g", g, "i", i)
				lg.Warn("leasequota: Redis call failed", "error", "context deadline exceeded")
				lg.Debug("leasequota: lease", "tenant", "t1")
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(tb.out.String(), "\n"), "\n")
	if got, want := len(lines), 2*goroutines*each; got != want {
		t.Fatalf("%d lines in the test's output, want %d (Info and Warn, no Debug):\n%s", got, want, tb.out.String())
	}
	var infos, warns int
	for _, l := range lines {
		if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " component=syncer") {
			t.Fatalf("line %q: want a whole record with the logger's attributes", l)
		}
		switch {
		case strings.Contains(l, ` level=INFO msg="leasequota: leasing resumed" component=syncer g=`):
			infos++
		case strings.Contains(l, ` level=WARN msg="leasequota: Redis call failed" component=syncer error="context deadline exceeded"`):
			warns++
		default:
			t.Fatalf("unexpected line %q", l)
		}
	}
	if infos != goroutines*each || warns != goroutines*each {
		t.Errorf("%d INFO and %d WARN lines, want %d of each", infos, warns, goroutines*each)
	}

	var stderr bytes.Buffer
	defer func(w io.Writer) { afterEnd = w }(afterEnd)
	afterEnd = &stderr
	tb.end()
	before := tb.out.Len()
	lg.Warn("leasequota: Redis unreachable")
	if tb.out.Len() != before {
		t.Errorf("a record logged after the test ended reached its output: %q", tb.out.String()[before:])
	}
	if got := stderr.String(); !strings.HasPrefix(got, "TestRecorded (logged after the test ended): time=") ||
		!strings.Contains(got, `msg="leasequota: Redis unreachable"`) {
		t.Errorf("after the test ended, stderr got %q", got)
	}
}

// TestLoggerAfterSubtest uses a logger made for a real subtest after the
// subtest ended, as a goroutine that outlives its test would: testing
// would panic if it still wrote to the subtest.
func TestLoggerAfterSubtest(t *testing.T) {
	var lg *slog.Logger
	t.Run("inner", func(t *testing.T) {
		lg = Logger(t)
		lg.Info("during the subtest")
	})
	var stderr bytes.Buffer
	defer func(w io.Writer) { afterEnd = w }(afterEnd)
	afterEnd = &stderr
	done := make(chan any)
	go func() {
		defer func() { done <- recover() }()
		lg.Info("after the subtest", "n", 1)
	}()
	if p := <-done; p != nil {
		t.Fatalf("logging after the subtest ended panicked: %v", p)
	}
	want := fmt.Sprintf("%s/inner (logged after the test ended): ", t.Name())
	if got := stderr.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, `msg="after the subtest" n=1`) {
		t.Errorf("stderr got %q, want a line starting %q", got, want)
	}
}

// TestLoggerGoRedisLines logs go-redis lines while a test holds a Logger:
// each distinct line reaches its output once, and its repeats are counted
// when it ends; with no test holding one they go to stderr.
func TestLoggerGoRedisLines(t *testing.T) {
	var stderr bytes.Buffer
	defer func(w io.Writer) { noTest = w }(noTest)
	noTest = &stderr
	ctx := context.Background()
	var gr goRedisLogger

	tb := &recordingTB{}
	lg := Logger(tb)
	if Logger(tb); len(tb.cleanups) != 1 {
		t.Fatalf("two Loggers of one test registered %d cleanups, want 1 (one writer per test)", len(tb.cleanups))
	}
	dial := "redis: connection pool: failed to dial after %d attempts: %v"
	for i := 0; i < 5; i++ {
		gr.Printf(ctx, dial, 5, "dial tcp 127.0.0.1:1: connect: connection refused")
	}
	lg.Info("between")
	gr.Printf(ctx, "cluster: %s", "reloading state")
	tb.end()
	want := "redis: connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:1: connect: connection refused\n" +
		"time=*\n" +
		"redis: cluster: reloading state\n" +
		"redis: connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:1: connect: connection refused (repeated 4 more times)\n"
	if got := tb.out.String(); !matchLines(got, want) {
		t.Errorf("test output:\n%s\nwant:\n%s", got, want)
	}
	if stderr.Len() != 0 {
		t.Errorf("go-redis lines went to stderr while a test held a Logger: %q", stderr.String())
	}

	gr.Printf(ctx, "after %s", "the test")
	if got := stderr.String(); !strings.HasSuffix(got, " redis: after the test\n") {
		t.Errorf("with no test holding a Logger, stderr got %q", got)
	}
}

// matchLines reports whether got has want's lines, where a line of want
// ending in * matches any line with what comes before the *.
func matchLines(got, want string) bool {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	if len(g) != len(w) {
		return false
	}
	for i := range w {
		if p, ok := strings.CutSuffix(w[i], "*"); ok {
			if !strings.HasPrefix(g[i], p) {
				return false
			}
		} else if g[i] != w[i] {
			return false
		}
	}
	return true
}
