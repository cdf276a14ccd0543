package integration

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/lease"
)

// The conformance suite's own model of a bucket and of the instance
// registry: the scripts' rules restated, for expectations independent of
// lease/memstore.

// us is t in microseconds.
func us(t time.Time) int64 { return t.UnixMicro() }

// confModel is the test's model of one bucket: the scripts' rules
// restated, with internal/peaks for the level history, fed with the times
// the store reported. It knows nothing of expiry (a case that lets a
// bucket expire calls forget) nor of the registry (confRegistry).
type confModel struct {
	live bool
	tk   float64
	ts   int64
	hb   int64
	rate float64 // of the last write, for its expiry
	h    peaks.History
	u    peaks.Unmerged // the same history, never merged
}

// level is the bucket refilled at rate up to burst at the call at time at.
func (m *confModel) level(at int64, rate float64, burst int64) float64 {
	if !m.live {
		return float64(burst)
	}
	x := m.tk + float64(at-m.ts)*rate/1e6
	if x > float64(burst) {
		x = float64(burst)
	}
	return max(x, 0)
}

// known makes the history that of an unknown past unless it was recorded
// under burst.
func (m *confModel) known(at int64, burst int64) {
	if m.live && m.hb == burst {
		return
	}
	top := burst
	if m.live {
		top = max(top, m.hb)
	}
	m.h.Reset(at, float64(top))
	m.u.Reset(at, float64(top))
}

func (m *confModel) store(at int64, tokens float64, lim lease.Limits) {
	m.live, m.tk, m.ts, m.hb, m.rate = true, tokens, at, lim.Burst, lim.Rate
	// Packed into field h, merged until it fits (bursts here are below
	// peaks.Limit: it is always kept).
	m.h.Pack(at, lim.Burst)
}

// expiry is when the bucket expires if left alone (µs): a second after
// it would be full again.
func (m *confModel) expiry() int64 {
	ms := math.Ceil((float64(m.hb)-m.tk)/m.rate*1000) + 1000
	return m.ts + int64(ms)*1000
}

// see records a call at time at that refilled the bucket, and returns the
// level it saw.
func (m *confModel) see(at int64, rate float64, burst int64) float64 {
	x := m.level(at, rate, burst)
	m.known(at, burst)
	m.h.Push(at, x)
	m.u.Push(at, x)
	return x
}

// acquire is an acquire of want at time at, without fair-share caps:
// the tokens granted and left.
func (m *confModel) acquire(at int64, lim lease.Limits, want int64) (int64, float64) {
	x := m.see(at, lim.Rate, lim.Burst)
	g := min(int64(math.Floor(x)), want)
	m.store(at, x-float64(g), lim)
	return g, m.tk
}

// release is a release of amount tokens at the bucket's time at, Redis's
// clock being clock (at, unless the bucket is frozen ahead of the clock),
// with age and grant: the credit, the tokens after it, and the credit a
// history without merges would have given. The age counts back from the
// clock, as release.lua counts it: from at, a frozen bucket's release
// that names no grant left the calls since clock - age out of the peak,
// and the model expected more credit than the scripts give.
func (m *confModel) release(at, clock int64, lim lease.Limits, amount int64, age time.Duration, grant lease.GrantID) (credit, tokens, unmerged float64) {
	if !m.live {
		return 0, float64(lim.Burst), 0
	}
	x := m.level(at, lim.Rate, lim.Burst)
	m.known(at, lim.Burst)
	ageMS := int64(age / time.Millisecond)
	if age%time.Millisecond != 0 {
		ageMS++
	}
	g := peaks.GrantTime(at, clock, ageMS*1000, uint32(grant))
	clamp := func(c float64) float64 { return max(min(c, float64(amount)), 0) }
	credit = clamp(float64(lim.Burst) - m.h.Peak(g, x))
	unmerged = clamp(float64(lim.Burst) - m.u.Peak(g, x))
	m.h.Raise(g, credit)
	m.u.Raise(g, credit)
	tokens = min(x+credit, float64(lim.Burst))
	m.store(at, tokens, lim)
	return credit, tokens, unmerged
}

// change is a quota change at time at from the quota old to next: the
// tokens after it.
func (m *confModel) change(at int64, old, next lease.Limits) float64 {
	x := min(m.level(at, old.Rate, old.Burst), float64(next.Burst))
	top := float64(max(old.Burst, next.Burst))
	m.h.Reset(at, top)
	m.u.Reset(at, top)
	m.store(at, x, next)
	return x
}

// forget is the bucket expiring.
func (m *confModel) forget() { *m = confModel{} }

// confRegistry models a tenant's instance registry (id → entry) and the
// summary of it that acquires keep in the bucket. Its summary must be
// forgotten (forget) when the bucket expires.
type confRegistry struct {
	entries map[string]confEntry
	sum     *confSummary
	// held says whether the last acquire's instance was held to its
	// share by the credit rule (its demand above it): it may reserve.
	held bool
}

type confEntry struct {
	seen           int64
	demand, credit float64
}

// confSummary is the bucket's rg: the instances, their total demand and
// the water level of the shares (-1: every demand met), as of at.
type confSummary struct {
	at           int64
	n            int
	total, level float64
}

// waterfill returns the water level of the max-min fair shares of rate
// among demands (-1 when every demand is met) and their total, in the
// scripts' order of operations: each share is min(demand, level).
func waterfill(rate float64, demands []float64) (level, total float64) {
	d := slices.Clone(demands)
	slices.Sort(d)
	left := rate
	level = -1
	for k, x := range d {
		total += x
		if level < 0 {
			if fair := left / float64(len(d)-k); x > fair {
				level = fair
			} else {
				left -= x
			}
		}
	}
	return level, total
}

// acquire is the registry's part of an acquire by instance id (window
// ms) at time at that saw level x and would grant granted: the instances
// counted, the share, and the grant after the credit cap. The shares come
// from the summary, recomputed from every entry when it is missing, an
// eighth of a window old, or the instance has no active entry, unless it
// has none at all and the summary's demands, with its own, are all met:
// it then joins the summary (one more instance, its demand added, the
// summary's time kept). The entry is rewritten when its credit or (by
// more than a quarter) its demand changes, or a quarter of a window after
// it was written.
func (r *confRegistry) acquire(id string, windowMS, at int64, lim lease.Limits, demand, x float64, granted int64) (int, float64, int64) {
	if !(demand >= 0) || math.IsInf(demand, 0) {
		demand = 0
	}
	window := float64(windowMS) * 1000
	var prev *confEntry
	e, known := r.entries[id]
	if known && e.seen >= at-windowMS*1000 {
		prev = &e
	}
	fresh := r.sum != nil && r.sum.at <= at && float64(at-r.sum.at) < window/8
	if fresh && !known && r.sum.level == -1 && r.sum.total+demand <= lim.Rate {
		r.sum = &confSummary{at: r.sum.at, n: r.sum.n + 1, total: r.sum.total + demand, level: -1}
	} else if prev == nil || !fresh {
		demands := []float64{demand}
		for k, e := range r.entries {
			switch {
			case k == id:
			case e.seen < at-windowMS*1000:
				delete(r.entries, k)
			default:
				demands = append(demands, e.demand)
			}
		}
		level, total := waterfill(lim.Rate, demands)
		r.sum = &confSummary{at: at, n: len(demands), total: total, level: level}
	}
	share := demand
	if r.sum.level >= 0 {
		share = min(share, r.sum.level)
	}
	capacity := max(float64(lim.Burst)*share/lim.Rate, min(share*window/2e6, float64(lim.Burst)/4), 1)
	credit := capacity
	if prev != nil {
		credit = min(prev.credit+share*float64(max(at-prev.seen, 0))/1e6, capacity)
	}
	r.held = false
	if r.sum.total > lim.Rate && x < float64(lim.Burst)/2 {
		granted = min(granted, int64(math.Floor(credit)))
		credit -= float64(granted)
		r.held = demand > share
	} else {
		credit = capacity
	}
	if prev == nil || credit != prev.credit || float64(at-prev.seen) >= window/4 || math.Abs(demand-prev.demand) > prev.demand/4 {
		if r.entries == nil {
			r.entries = map[string]confEntry{}
		}
		r.entries[id] = confEntry{seen: at, demand: demand, credit: credit}
	}
	return r.sum.n, share, granted
}

// fields returns the registry as Redis holds it.
func (r *confRegistry) fields() map[string]string {
	if len(r.entries) == 0 {
		return nil
	}
	f := map[string]string{}
	for id, e := range r.entries {
		f[id] = fmt.Sprintf("%d:%.17g:%.17g:", e.seen, e.demand, e.credit)
	}
	return f
}

// reserve is the reservation of an acquire at the bucket's time at and
// the store's clock, after an immediate grant of granted of want that
// left tokens, by an instance of the given share (held to it by the
// credit rule, or not) with a reservation of lms milliseconds: the tokens
// reserved, their pace, and the bucket's time to store (at when nothing
// is reserved). The whole tokens left stay in the bucket. Every operation
// is the script's, in its order.
func reserve(at, clock int64, lim lease.Limits, want, granted int64, tokens, share float64, lms int64, held bool) (int64, float64, int64) {
	if lms <= 0 || !(share > 0) || !(want > granted && tokens < 1 || held) {
		return 0, 0, at
	}
	tokens -= math.Floor(tokens) // the whole tokens stay in the bucket
	ahead := lease.ReserveAhead.Microseconds()
	room := float64(clock+ahead-at)*lim.Rate/1e6 + tokens
	r := math.Floor(min(share, lim.Rate) * float64(lms) / 1000)
	if room < r {
		r = math.Floor(room)
	}
	for ; r > 0; r-- {
		if ts := int64(math.Ceil(float64(at) + (r-tokens)*1e6/lim.Rate)); ts <= clock+ahead {
			return int64(r), min(share, lim.Rate), ts
		}
	}
	return 0, 0, at
}
