package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// snapshot is the live totals of a run.
type snapshot struct {
	Elapsed    time.Duration
	Decisions  int64
	Admitted   int64
	Denied     int64
	RoundTrips int64
}

// progress prints one live line: rewritten in place with \r on a
// terminal, a plain line a second otherwise.
type progress struct {
	w    io.Writer
	term bool

	mu    sync.Mutex
	label string
	prev  snapshot
	hist  []snapshot // recent snapshots, for a rate over the last second
	width int        // of the last line written in place
}

func newProgress(w io.Writer, term bool) *progress {
	return &progress{w: w, term: term}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// start begins a new phase ("leasequota", "baseline").
func (p *progress) start(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.prev, p.width, p.hist = label, snapshot{}, 0, nil
}

func (p *progress) every() time.Duration {
	if p.term {
		return 250 * time.Millisecond
	}
	return time.Second
}

// line formats s, with the decision rate since the oldest snapshot of
// the last second (or since prev, when there is none).
func (p *progress) line(s snapshot) string {
	from := p.prev
	for len(p.hist) > 0 && s.Elapsed-p.hist[0].Elapsed > time.Second {
		p.hist = p.hist[1:]
	}
	if len(p.hist) > 0 {
		from = p.hist[0]
	}
	rate := 0.0
	if dt := s.Elapsed - from.Elapsed; dt > 0 {
		rate = float64(s.Decisions-from.Decisions) / dt.Seconds()
	}
	p.prev = s
	p.hist = append(p.hist, s)
	return fmt.Sprintf("[%s] %5.1fs  %9s decisions/s  admitted %s  denied %s  Redis calls %s",
		p.label, s.Elapsed.Seconds(), group(int64(rate)), group(s.Admitted), group(s.Denied), group(s.RoundTrips))
}

func (p *progress) update(s snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.line(s)
	if !p.term {
		fmt.Fprintln(p.w, l)
		return
	}
	pad := max(p.width-len(l), 0)
	p.width = len(l)
	fmt.Fprintf(p.w, "\r%s%*s", l, pad, "")
}

// done prints the phase's final totals, with the average rate, and ends
// its line.
func (p *progress) done(s snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prev, p.hist = snapshot{}, nil
	l := p.line(s) + "  (done)"
	if p.term {
		fmt.Fprintf(p.w, "\r%s%*s\n", l, max(p.width-len(l), 0), "")
		p.width = 0
		return
	}
	fmt.Fprintln(p.w, l)
}

// group formats n with thousands separators: 1234567 -> "1,234,567".
func group(n int64) string {
	if n < 0 {
		return "-" + group(-n)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// note prints a line of its own before the progress line starts.
func (p *progress) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, s)
}
