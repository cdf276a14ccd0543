package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxLogLines bounds the limiter log lines kept per run.
const maxLogLines = 500

// logLine is one record a limiter logged, at a time of the run.
type logLine struct {
	At       time.Duration
	Instance int
	Level    string
	Text     string // message and attributes, key=value
}

// logBook collects what the limiters log (WithLogger), so that it shows
// in the summary and the report instead of tearing the progress line.
type logBook struct {
	mu      sync.Mutex
	start   time.Time
	lines   []logLine
	dropped int
}

func (b *logBook) add(l logLine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lines) >= maxLogLines {
		b.dropped++
		return
	}
	b.lines = append(b.lines, l)
}

// Lines returns the lines kept and how many more were dropped.
func (b *logBook) Lines() ([]logLine, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]logLine(nil), b.lines...), b.dropped
}

// logger returns a logger for one instance's limiter.
func (b *logBook) logger(instance int) *slog.Logger {
	return slog.New(&logHandler{book: b, instance: instance})
}

// logHandler is a slog.Handler writing to a logBook; Info and above.
type logHandler struct {
	book     *logBook
	instance int
	attrs    []slog.Attr
	group    string
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		if a.Equal(slog.Attr{}) {
			return true
		}
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		fmt.Fprintf(&sb, " %s=%v", key, a.Value.Resolve())
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	h.book.add(logLine{At: r.Time.Sub(h.book.start), Instance: h.instance, Level: r.Level.String(), Text: sb.String()})
	return nil
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
