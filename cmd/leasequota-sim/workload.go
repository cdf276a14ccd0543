package main

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasequota/leasequota"
)

// tier is a size of quota: a few large tenants, many small ones.
type tier struct {
	name  string
	rate  float64 // tokens per second
	burst int64
	share float64 // fraction of the tenants; the last tier takes the rest
}

// The rates are whole numbers below 1e6 on purpose: the per-request
// baseline (redis_rate) takes integer rates, and the embedded Redis
// (miniredis on gopher-lua) cannot parse a rate that Go formats in
// exponent form without a decimal point, such as "1e+06".
var tiers = []tier{
	{name: "large", rate: 2000, burst: 400, share: 0.06},
	{name: "medium", rate: 400, burst: 100, share: 0.24},
	{name: "small", rate: 50, burst: 25},
}

// fleetTiers is the fleet scenario's one tier, the tenants of issue #15's
// fleet shapes: Rate 100, Burst 100, every tenant over its quota.
var fleetTiers = []tier{{name: "fleet", rate: 100, burst: 100}}

// tightTiers are the tight scenario's tenants (issue #16): bursts of 0.1 s
// of rate, each shared by the first tightInstances instances, then the
// low-rate tenants (20/s, burst 40) that every instance shares. Each tight
// tier has a share of 2% of the tenants and at least one; low takes the
// rest. Every tenant is offered 3x its quota.
var tightTiers = []tier{
	{name: "tight3000", rate: 3000, burst: 300, share: 0.02},
	{name: "tight800", rate: 800, burst: 100, share: 0.02},
	{name: "tight300", rate: 300, burst: 50, share: 0.02},
	{name: "low20", rate: 20, burst: 40},
}

// The tight scenario's instances: the tight tenants' traffic goes to the
// first tightInstances instances, a third each, and onOffSlot takes its
// third only during on phases: onOffPhase on, onOffPhase off, on first.
const (
	tightInstances = 3
	onOffSlot      = 2
	onOffPhase     = 700 * time.Millisecond
)

// pattern is how a tenant's demand compares with its quota.
type pattern int

const (
	patOver   pattern = iota // steadily 3x the quota
	patUnder                 // steadily half the quota
	patBursty                // 6x the quota for 1 s, then nothing for 1 s
)

var patternNames = [...]string{patOver: "over", patUnder: "under", patBursty: "bursty"}

func (p pattern) String() string { return patternNames[p] }

const (
	overFactor   = 3.0
	underFactor  = 0.5
	burstyFactor = 6.0
	burstyPeriod = 2 * time.Second
)

// simTenant is one tenant of the workload.
type simTenant struct {
	Name    string
	Class   int // index in workload.Classes
	Quota   leasequota.Quota
	Pattern pattern
	Phase   time.Duration // offset of a bursty tenant's on/off cycle
	// Tight is true for the tight scenario's tight tenants, served by the
	// first tightInstances instances only.
	Tight bool
}

// class is tenants of one tier and one demand pattern; the tables and
// charts aggregate by class.
type class struct {
	Name    string // "tier/pattern"
	Tier    string
	Pattern pattern
	Rate    float64 // per tenant
	Burst   int64   // per tenant
	Tenants []int   // indexes in workload.Tenants
}

// event is a span of the run where something happens (an outage, an
// instance stopped, a burst), for the report's shading and the bound's
// accounting.
type event struct {
	Kind     string // "outage", "burst", "stopped", "hot"
	Label    string
	From, To time.Duration
}

// workload is the whole simulated traffic: who asks for what, when, and
// through which instance. Its methods are pure functions of the time
// since the run started, so they are tested without running anything.
type workload struct {
	Scenario string
	Duration time.Duration
	Load     float64
	Tenants  []simTenant
	Classes  []class
	slots    []slot // instance slots: the initial instances, plus one for churn
}

// slot is one instance's lifetime in the run.
type slot struct {
	Start, Stop time.Duration // active during [Start, Stop)
}

// newWorkload builds the workload of cfg. Tenants are assigned tiers in
// order (large first) and, within a tier, cycle through the patterns, so
// every tier has over, under and bursty tenants when it has three or more.
// The fleet scenario has one tier (fleetTiers) and one pattern, over.
func newWorkload(cfg Config) *workload {
	w := &workload{Scenario: cfg.Scenario, Duration: cfg.Duration, Load: cfg.Load}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	ts, patterns := tiers, 3
	switch cfg.Scenario {
	case "fleet":
		ts, patterns = fleetTiers, 1
	case "tight":
		ts, patterns = tightTiers, 1
	}
	counts := make([]int, len(ts))
	left := cfg.Tenants
	for i, t := range ts {
		if i == len(ts)-1 {
			counts[i] = left
			break
		}
		n := int(float64(cfg.Tenants)*t.share + 0.5)
		if n == 0 && (i == 0 || cfg.Scenario == "tight") {
			n = 1 // always one large tenant, and one of each tight tier
		}
		n = min(n, left)
		counts[i] = n
		left -= n
	}
	classIdx := map[string]int{}
	for ti, t := range ts {
		for k := 0; k < counts[ti]; k++ {
			p := pattern(k % patterns)
			name := t.name + "/" + p.String()
			ci, ok := classIdx[name]
			if !ok {
				ci = len(w.Classes)
				classIdx[name] = ci
				w.Classes = append(w.Classes, class{Name: name, Tier: t.name, Pattern: p, Rate: t.rate, Burst: t.burst})
			}
			idx := len(w.Tenants)
			w.Tenants = append(w.Tenants, simTenant{
				Name:    fmt.Sprintf("%s-%03d", t.name, idx),
				Class:   ci,
				Quota:   leasequota.Quota{Rate: t.rate, Burst: t.burst},
				Pattern: p,
				Phase:   time.Duration(rng.Int64N(int64(burstyPeriod))),
				Tight:   cfg.Scenario == "tight" && ti < len(ts)-1,
			})
			w.Classes[ci].Tenants = append(w.Classes[ci].Tenants, idx)
		}
	}
	w.slots = make([]slot, cfg.Instances)
	for i := range w.slots {
		w.slots[i] = slot{Start: 0, Stop: cfg.Duration}
	}
	if cfg.Scenario == "churn" {
		last := len(w.slots) - 1
		w.slots[last].Stop = w.frac(0.35)
		w.slots = append(w.slots, slot{Start: w.frac(0.55), Stop: cfg.Duration})
	}
	return w
}

// frac returns the time at fraction f of the run, rounded to the
// millisecond.
func (w *workload) frac(f float64) time.Duration {
	return (time.Duration(float64(w.Duration) * f)).Round(time.Millisecond)
}

// Slots returns the instance slots.
func (w *workload) Slots() []slot { return w.slots }

// Demand returns tenant i's demand at time t in requests per second,
// summed over all instances.
func (w *workload) Demand(i int, t time.Duration) float64 {
	tn := &w.Tenants[i]
	var f float64
	switch tn.Pattern {
	case patOver:
		f = overFactor
	case patUnder:
		f = underFactor
	case patBursty:
		if (t+tn.Phase)%burstyPeriod < burstyPeriod/2 {
			f = burstyFactor
		}
	}
	if w.Scenario == "burst" && t >= w.frac(0.4) && t < w.frac(0.6) {
		f *= 4
	}
	return f * tn.Quota.Rate * w.Load
}

// Rate returns tenant i's demand on instance slot s at time t, in
// requests per second; wgt is Weight(s, t). In the tight scenario a tight
// tenant's demand is split in thirds over the first tightInstances slots,
// and onOffSlot's third is dropped (not moved) in its off phases; every
// other tenant's demand is spread by Weight.
func (w *workload) Rate(i, s int, t time.Duration, wgt float64) float64 {
	if !w.Tenants[i].Tight {
		return w.Demand(i, t) * wgt
	}
	if s >= tightInstances || (s == onOffSlot && !onPhase(t)) {
		return 0
	}
	return w.Demand(i, t) / tightInstances
}

// onPhase reports whether onOffSlot serves the tight tenants at t.
func onPhase(t time.Duration) bool { return t%(2*onOffPhase) < onOffPhase }

// Weight returns the share of all traffic that instance slot s receives
// at time t; the shares of the slots active at t add up to 1.
func (w *workload) Weight(s int, t time.Duration) float64 {
	if !w.active(s, t) {
		return 0
	}
	active := 0
	for i := range w.slots {
		if w.active(i, t) {
			active++
		}
	}
	if w.Scenario == "skew" && active > 1 {
		hot := w.hot(t)
		if s == hot {
			return 0.7
		}
		return 0.3 / float64(active-1)
	}
	return 1 / float64(active)
}

// hot is the slot that takes most traffic in the skew scenario.
func (w *workload) hot(t time.Duration) int {
	if t < w.frac(0.5) {
		return 0
	}
	return 1
}

func (w *workload) active(s int, t time.Duration) bool {
	return t >= w.slots[s].Start && t < w.slots[s].Stop
}

// Outage returns the window during which Redis is unreachable.
func (w *workload) Outage() (from, to time.Duration, ok bool) {
	if w.Scenario != "outage" {
		return 0, 0, false
	}
	return w.frac(0.4), w.frac(0.6), true
}

// Events returns the spans the report shades.
func (w *workload) Events() []event {
	switch w.Scenario {
	case "outage":
		from, to, _ := w.Outage()
		return []event{{Kind: "outage", Label: "Redis unreachable", From: from, To: to}}
	case "burst":
		return []event{{Kind: "burst", Label: "demand x4", From: w.frac(0.4), To: w.frac(0.6)}}
	case "churn":
		last := len(w.slots) - 2
		return []event{{Kind: "stopped", Label: fmt.Sprintf("instance %d closed, instance %d not yet started", last, last+1),
			From: w.slots[last].Stop, To: w.slots[last+1].Start}}
	case "skew":
		return []event{
			{Kind: "hot", Label: "instance 0 takes 70%", From: 0, To: w.frac(0.5)},
			{Kind: "hot", Label: "instance 1 takes 70%", From: w.frac(0.5), To: w.Duration},
		}
	case "tight":
		var ev []event
		for from := onOffPhase; from < w.Duration; from += 2 * onOffPhase {
			ev = append(ev, event{Kind: "off", Label: fmt.Sprintf("instance %d idle for the tight tenants", onOffSlot),
				From: from, To: min(from+onOffPhase, w.Duration)})
		}
		return ev
	}
	return nil
}

// QuotaOf returns the quota of a tenant by name, for WithQuotaFunc.
func (w *workload) quotaFunc() func(string) leasequota.Quota {
	m := make(map[string]leasequota.Quota, len(w.Tenants))
	for _, t := range w.Tenants {
		m[t.Name] = t.Quota
	}
	return func(name string) leasequota.Quota { return m[name] }
}
