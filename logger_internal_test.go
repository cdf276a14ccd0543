package leasequota

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogOption sends a Limiter's logs to t.Log, as the external tests'
// testLogger does: tests are quiet, and a failing one shows its logs.
// Lines logged after the test ended are dropped (t.Log would panic).
func testLogOption(t testing.TB) Option {
	w := &tbWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return WithLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// tbWriter writes each slog line to t.Log.
type tbWriter struct {
	t    testing.TB
	mu   sync.Mutex // guards done
	done bool       // the test has ended
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Helper()
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
