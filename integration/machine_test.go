package integration

import (
	"fmt"
	"runtime/metrics"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/schedwait"
)

// stallProbe measures what the machine delivers to this test process: a
// goroutine asks to wake up every probeTick and records how late it woke.
// A late wake-up is time in which a runnable goroutine of this process
// (the limiters' syncers, the load's goroutines, go-redis' readers) could
// not run: the two cores were busy with other processes, or with other
// goroutines of this one. It also reads the process's CPU time.
type stallProbe struct {
	began time.Time
	cpu0  time.Duration
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	wakes  int
	stalls []stall // wake-ups at least stallMin late, in time order
	ended  time.Time
	cpu    time.Duration // CPU time used between start and Stop
}

// stall is one late wake-up: the probe slept from at and woke late after
// its tick.
type stall struct {
	at   time.Time
	late time.Duration
}

const (
	probeTick = 2 * time.Millisecond
	// stallMin is the lateness that counts as a stall: well above what a
	// quiet machine shows with -race (under a millisecond), well below the
	// lease call deadlines (tens of milliseconds).
	stallMin = 10 * time.Millisecond
)

// startStallProbe starts the probe; Stop ends it.
func startStallProbe() *stallProbe {
	p := &stallProbe{began: time.Now(), cpu0: processCPU(), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *stallProbe) run() {
	defer close(p.done)
	t := time.NewTimer(probeTick)
	defer t.Stop()
	for {
		at := time.Now()
		t.Reset(probeTick)
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		late := time.Since(at) - probeTick
		p.mu.Lock()
		p.wakes++
		if late >= stallMin {
			p.stalls = append(p.stalls, stall{at, late})
		}
		p.mu.Unlock()
	}
}

// Stop ends the probe and waits for it; it may be called again.
func (p *stallProbe) Stop() {
	p.mu.Lock()
	if !p.ended.IsZero() {
		p.mu.Unlock()
		return
	}
	p.ended = time.Now()
	p.cpu = processCPU() - p.cpu0
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}

// worst returns the latest wake-up of a sleep that overlapped [from, to].
func (p *stallProbe) worst(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w time.Duration
	for _, s := range p.stalls {
		if s.at.Before(to) && s.at.Add(probeTick+s.late).After(from) {
			w = max(w, s.late)
		}
	}
	return w
}

// stallExplains is the rule by which a stall of this process explains a
// denial that a refresh on time would have prevented: a stall of at
// least a tick of the default refresh (a quarter interval) within the
// two intervals before the denial, when the refresh that would have
// covered it was due. (A stall of the load's goroutines also reads as a
// gap in the tenant's demand, and a plan that finds none keeps no lease:
// the next request is a cold start.)
const (
	stallExplainsWindow = 2 * leasequota.DefaultRefreshInterval
	stallExplainsLeast  = leasequota.DefaultRefreshInterval / 4
)

// unexplained returns how many of the denials at times at followed no
// stall that explains them (stallExplainsWindow, stallExplainsLeast), and
// the worst stall before any of them.
func (p *stallProbe) unexplained(at []time.Time) (n int, worst time.Duration) {
	for _, a := range at {
		w := p.worst(a.Add(-stallExplainsWindow), a)
		if w < stallExplainsLeast {
			n++
		}
		worst = max(worst, w)
	}
	return n, worst
}

// delivered returns the share of the run in which this process could run
// when it wanted to: 1 less the stalls' total lateness over the time the
// probe ran (so far), at least 0.1. On a quiet machine it is near 1; with
// other processes keeping both cores busy, well below.
func (p *stallProbe) delivered() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	end := p.ended
	if end.IsZero() {
		end = time.Now()
	}
	return p.deliveredLocked(p.began, end)
}

// deliveredIn is delivered over the window [from, to] alone, counting
// the stalls that began in it (1 for an empty window). A zero from is
// the probe's start.
func (p *stallProbe) deliveredIn(from, to time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from.IsZero() || from.Before(p.began) {
		from = p.began
	}
	return p.deliveredLocked(from, to)
}

// deliveredLocked is 1 less the lateness of the stalls that began in
// [from, to] over its length, at least 0.1; 1 for an empty window. p.mu
// must be held.
func (p *stallProbe) deliveredLocked(from, to time.Time) float64 {
	wall := to.Sub(from)
	if wall <= 0 {
		return 1
	}
	var sum time.Duration
	for _, s := range p.stalls {
		if !s.at.Before(from) && s.at.Before(to) {
			sum += s.late
		}
	}
	return max(0.1, 1-sum.Seconds()/wall.Seconds())
}

// utilizationFloor is the least share of what is due that a tenant must
// be admitted, on what the machine delivered to this process: 90 % of
// it on a quiet machine (delivered >= 0.9), busy of it on a busy one,
// where a stalled syncer loses more than the stalled time (its calls in
// flight time out too). busy is 0.8 for most tests: with two busy loops
// beside them, clusters delivered 0.45 and admitted 0.38-0.40 of what
// was due. Below starvedDelivery there is no floor: the lease calls of a
// process stalled most of the time run out of their deadlines whatever
// the library does (a run beside two busy loops and a compiler
// delivered 0.117, and its tenants admitted 0-3 % of what was due,
// against a floor of 9 %), and the test can only check the bound.
func utilizationFloor(p *stallProbe, busy float64) float64 {
	switch d := p.delivered(); {
	case d < starvedDelivery:
		return 0
	case d < 0.9:
		return busy * d
	default:
		return 0.9 * d
	}
}

// starvedDelivery is the share of a run below which this process was
// stalled too long for its admissions to say anything about the library
// (utilizationFloor).
const starvedDelivery = 0.25

// spanLocked returns the wall time the probe ran over (so far, while it
// runs) and the CPU this process used in it. p.mu must be held.
func (p *stallProbe) spanLocked() (wall, cpu time.Duration) {
	end, cpu := p.ended, p.cpu
	if end.IsZero() {
		end, cpu = time.Now(), processCPU()-p.cpu0
	}
	return end.Sub(p.began), cpu
}

// cores returns the CPU this process used over the probe's run, in cores
// (CPU time over wall time).
func (p *stallProbe) cores() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return coresOf(p.spanLocked())
}

// coresOf is cpu over wall, in cores (0 for no wall time).
func coresOf(wall, cpu time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds()
}

// String summarizes what the machine delivered, for the test log.
func (p *stallProbe) String() string {
	p.mu.Lock()
	wall, cpu := p.spanLocked()
	var sum, worst time.Duration
	for _, s := range p.stalls {
		sum += s.late
		worst = max(worst, s.late)
	}
	n, wakes := len(p.stalls), p.wakes
	p.mu.Unlock()
	return fmt.Sprintf("machine: this process used %.2f cores over %v; %d of %d probe wake-ups were >= %v late (%v in all, worst %v)",
		coresOf(wall, cpu), wall.Round(time.Millisecond), n, wakes, stallMin, sum.Round(time.Millisecond), worst.Round(time.Millisecond))
}

// processCPU returns the user and system CPU time this process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedWaits is a read of the Go runtime's distribution of how long this
// process's goroutines waited, runnable, before they ran: the reading by
// which a limiter tells a process that could not run its calls in time
// from a silent Redis (syncer/starved.go). The limiters of a test run in
// its process, so the test reads what they read.
type schedWaits struct {
	counts  []uint64
	buckets []float64 // len(counts) + 1 boundaries, seconds
}

// readSchedWaits reads the distribution now (none when the runtime does
// not serve it).
func readSchedWaits() schedWaits {
	s := []metrics.Sample{{Name: schedwait.Metric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedWaits{}
	}
	h := s[0].Value.Float64Histogram()
	return schedWaits{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// atLeastSince returns how many waits of at least d came between the
// read before and w, by the rule the limiters apply (schedwait.AtLeast).
func (w schedWaits) atLeastSince(before schedWaits, d time.Duration) uint64 {
	return schedwait.AtLeast(before.counts, w.counts, w.buckets, d.Seconds())
}
