package syncer

import (
	"runtime"
	"time"
)

// Tokens per CPU (Options.PerCPUDemand; docs/design.md, "Tokens per
// CPU"). A tenant whose demand here is at least PerCPUDemand keeps its
// leased tokens in a slot per P (bucket.Counter.Stripe), so that requests
// on several CPUs do not move one count's cache line between them on
// every spend. A split counter costs a spend on one goroutine more than
// it saves (which P it runs on, one more cache line; docs/performance.md,
// "Tokens per CPU"), so a counter whose tokens turn
// out to be spent from one P alone is joined again, and tried split
// again only at its probe, once every soloProbe.

// soloSample is how many tokens the slots' own Ps spend between two
// judgements of a split counter (bucket.Counter.Homes): about 13 ms of a
// demand of 10,000 a second, a few of the syncer's ticks.
const soloSample = 128

// soloProbe is how often a tenant whose split counter was found spent
// from one P (flagSolo) is split again to look, for one refresh interval,
// each tenant at a phase of its own (probing). Why: a hot tenant's spends
// may move to several CPUs at any time (a service's load grows, its
// handlers fan out), and nothing tells an unsplit counter from which P it
// is spent; a look costs one interval of split spends every 8 s.
const soloProbe = 8 * time.Second

// spread keeps t's counter split into a slot per P, and its slots topped
// up, while its demand is at least Options.PerCPUDemand and its slots are
// spent from more than one P; it joins them back into one count once the
// demand falls under a quarter of that, or a sample of the spends came
// from one P (bucket.Counter.Homes; then flagSolo holds the counter
// joined until t's probe). Never when Driven, whose decisions must not
// depend on the P a request ran on, nor with GOMAXPROCS 1. now is the
// time of t's plan; t's lock is held.
func (s *Syncer) spread(t *Tenant, now time.Time) {
	hot := s.opts.PerCPUDemand
	if hot <= 0 || s.opts.Driven {
		return
	}
	demand := t.st().Demand()
	if t.tokens.Slots() > 0 {
		if demand < hot/4 {
			t.restripe(1)
			return
		}
		if homes, ok := t.tokens.Homes(soloSample); ok && homes <= 1 {
			t.setFlag(flagSolo, true)
			t.restripe(1)
			return
		}
		// GOMAXPROCS takes the scheduler's lock: read for hot tenants only.
		t.restripe(runtime.GOMAXPROCS(0))
		return
	}
	if demand < hot || t.flag(flagSolo) && !s.probing(t, now) {
		return
	}
	t.setFlag(flagSolo, false)
	t.restripe(runtime.GOMAXPROCS(0))
}

// probing reports whether now is in t's probe: the first refresh interval
// of each soloProbe, offset by the tenant's hash so that the tenants of
// an instance do not all split at once. A hot tenant is planned every
// quarter interval, so each probe finds it planned a few times.
func (s *Syncer) probing(t *Tenant, now time.Time) bool {
	per := int64(soloProbe)
	return mod(now.UnixNano()+hashPhase(t.st().hash, per), per) < int64(s.planner.Config().Interval)
}

// hashPhase is a tenant's phase in a period of per units (whatever the
// unit), from its name's hash h: spread evenly over [0, per).
func hashPhase(h uint32, per int64) int64 { return int64(uint64(h) * uint64(per) >> 32) }
