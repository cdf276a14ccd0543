package redistest

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Logger returns a logger whose records go to the log of the test t: the
// stream of t.Log (t.Output, indented like t.Log lines but without their
// file:line, which would name this helper), shown for a failing test or
// with -v. Give it to the code under test, for example with
// leasequota.WithLogger(redistest.Logger(t)), so that a library's WARN and
// INFO lines land under the test that caused them instead of on stderr,
// in the middle of other tests' output:
//
//	time=14:03:07.412 level=WARN msg="leasequota: Redis call failed" operation=acquire error.type=timeout ...
//
// Records below Info are dropped. The logger is safe for concurrent use
// by any number of goroutines while the test runs. Once the test has
// ended (its cleanups, this logger's included, have run), a goroutine that
// outlived it must not write to it (testing panics, or files the line
// under a parent test): its records go to stderr, prefixed with the
// test's name, so that they are seen and attributed.
//
// While a test holds a Logger, the lines go-redis logs (it has one logger
// for the whole process, which Main sets) go to its log too, each line
// once, with a count of its repeats when the test ends: a dead Redis node
// makes go-redis log the same failed dial hundreds of times.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFor(t), &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	}))
}

// afterEnd is where records logged after their test ended go, and
// noTest where go-redis' lines go while no test holds a Logger.
var (
	afterEnd io.Writer = os.Stderr
	noTest   io.Writer = os.Stderr
)

// writers holds the testWriter of every running test that has a Logger.
var writers struct {
	sync.Mutex
	byTest map[testing.TB]*testWriter
}

// writerFor returns t's testWriter, making it on t's first Logger.
func writerFor(t testing.TB) *testWriter {
	writers.Lock()
	defer writers.Unlock()
	if w := writers.byTest[t]; w != nil {
		return w
	}
	w := &testWriter{out: t.Output(), name: t.Name()}
	if writers.byTest == nil {
		writers.byTest = map[testing.TB]*testWriter{}
	}
	writers.byTest[t] = w
	t.Cleanup(func() {
		writers.Lock()
		delete(writers.byTest, t)
		writers.Unlock()
		w.end()
	})
	return w
}

// testWriter writes a test's log lines to its output while the test runs,
// and to afterEnd after it. slog's handlers write each record in one call.
type testWriter struct {
	mu      sync.Mutex // guards the fields below, and orders writes with end
	out     io.Writer  // the test's output; nil once the test ended
	name    string
	repeats map[string]int // go-redis lines written, and their repeats since
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out == nil {
		fmt.Fprintf(afterEnd, "%s (logged after the test ended): %s", w.name, p)
		return len(p), nil
	}
	return w.out.Write(p)
}

// goRedis writes a line go-redis logged, the first time; after that it
// counts the line's repeats, which end reports.
func (w *testWriter) goRedis(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out == nil {
		return
	}
	if n, ok := w.repeats[line]; ok {
		w.repeats[line] = n + 1
		return
	}
	if w.repeats == nil {
		w.repeats = map[string]int{}
	}
	w.repeats[line] = 0
	fmt.Fprintf(w.out, "%s\n", line)
}

// end reports the repeated go-redis lines and stops writing to the test's
// output; it runs as the test's cleanup.
func (w *testWriter) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := make([]string, 0, len(w.repeats))
	for l, n := range w.repeats {
		if n > 0 {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintf(w.out, "%s (repeated %d more times)\n", l, w.repeats[l])
	}
	w.out = nil
}

// goRedisLogger is go-redis' logger while Main runs the tests: it sends
// each line to every running test that holds a Logger (go-redis does not
// say which client, let alone which test, a line is about; tests that run
// in parallel all get it), or to stderr while none does.
type goRedisLogger struct{}

var stderrLog = log.New(noTestWriter{}, "", log.LstdFlags)

type noTestWriter struct{}

func (noTestWriter) Write(p []byte) (int, error) { return noTest.Write(p) }

func (goRedisLogger) Printf(_ context.Context, format string, v ...interface{}) {
	line := fmt.Sprintf(format, v...)
	if !strings.HasPrefix(line, "redis: ") {
		line = "redis: " + line
	}
	writers.Lock()
	ws := make([]*testWriter, 0, len(writers.byTest))
	for _, w := range writers.byTest {
		ws = append(ws, w)
	}
	writers.Unlock()
	if len(ws) == 0 {
		stderrLog.Print(line)
		return
	}
	for _, w := range ws {
		w.goRedis(line)
	}
}
