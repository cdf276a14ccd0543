package leasequota_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLog is a slog.Handler that writes a limiter's logs to t.Log, so a
// failing test's output shows them next to its own lines and a passing
// test's output stays quiet. Logs after the test has ended are dropped
// (t.Log would panic).
type testLog struct {
	t     testing.TB
	attrs []slog.Attr
	state *testLogState
	// on, when set, sees every record (tests that watch for a message).
	on func(slog.Record)
}

type testLogState struct {
	mu   sync.Mutex // guards done
	done bool
}

// testLogger returns a logger writing to t.Log until t ends.
func testLogger(t testing.TB) *slog.Logger { return slog.New(newTestLog(t, nil)) }

func newTestLog(t testing.TB, on func(slog.Record)) *testLog {
	h := &testLog{t: t, state: &testLogState{}, on: on}
	t.Cleanup(func() {
		h.state.mu.Lock()
		h.state.done = true
		h.state.mu.Unlock()
	})
	return h
}

func (h *testLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *testLog) Handle(_ context.Context, r slog.Record) error {
	if h.on != nil {
		h.on(r)
	}
	line := r.Level.String() + " " + r.Message
	for _, a := range h.attrs {
		line += " " + a.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.state.mu.Lock()
	defer h.state.mu.Unlock()
	if !h.state.done {
		h.t.Log(line)
	}
	return nil
}

func (h *testLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *testLog) WithGroup(string) slog.Handler { return h }

// captureLogger returns a logger that writes to t.Log as testLogger does
// and also keeps, in slog's text format, the records at level or above:
// for tests that read what the limiter logged.
func captureLogger(t testing.TB, level slog.Level) (*slog.Logger, *logText) {
	text := &logText{}
	h := tee{newTestLog(t, nil), slog.NewTextHandler(text, &slog.HandlerOptions{Level: level})}
	return slog.New(h), text
}

// logText is the text a captureLogger kept. Safe for concurrent use.
type logText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logText) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tee is a slog.Handler that hands each record to every handler that
// takes its level.
type tee []slog.Handler

func (t tee) Enabled(ctx context.Context, level slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, level) {
			return true
		}
	}
	return false
}

func (t tee) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t tee) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make(tee, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(attrs)
	}
	return out
}

func (t tee) WithGroup(name string) slog.Handler {
	out := make(tee, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}
