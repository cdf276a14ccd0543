package redistest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
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
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{out: t.Output(), name: t.Name()}
	t.Cleanup(w.end)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	}))
}

// afterEnd is where records logged after their test ended go.
var afterEnd io.Writer = os.Stderr

// testWriter writes a handler's lines to a test's output while the test
// runs, and to afterEnd after it. slog's handlers write each record in
// one call.
type testWriter struct {
	mu   sync.Mutex // guards out, and orders writes with end
	out  io.Writer  // the test's output; nil once the test ended
	name string
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

// end stops writing to the test's output; it runs as the test's cleanup.
func (w *testWriter) end() {
	w.mu.Lock()
	w.out = nil
	w.mu.Unlock()
}
