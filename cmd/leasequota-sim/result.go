package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/leasequota/leasequota"
)

// Result is everything a run measured; the table and the report render it.
type Result struct {
	Config  Config
	Redis   string        // where Redis was
	Started time.Time     // wall clock at the start
	Run     time.Duration // length of the workload
	Elapsed time.Duration // from the start to the last Close
	// WorkT is from the start to the moment every request goroutine had
	// stopped (Close excluded): T in the bound B + r*T, as no request is
	// admitted after it (the time Close takes would loosen the bound by
	// r a second and hide an over-admission that size), and T of the
	// fleet headline's utilization, as the baseline's is its own run.
	WorkT   time.Duration
	Step    time.Duration // width of a time-series bucket
	Events  []event
	Slots   []slot
	Classes []ClassResult
	Tenants []TenantResult
	// Instances are each instance's decisions.
	Instances []InstanceResult
	Total     Totals
	Series    Series
	Lib       leasequota.Stats // lease traffic summed over the instances
	// LeaseTTL is the limiters' lease lifetime, and WindowL the L of the
	// window bound B + r*(W + L): the lease lifetime, plus, with
	// reservations, their length and lease.ReserveAhead (a reserved token
	// comes due up to that long after the bucket refilled it).
	LeaseTTL, WindowL time.Duration
	// Modes are the failure modes that decided degraded decisions, with
	// their counts.
	Modes       map[string]int64
	Logs        []logLine // what the limiters logged
	LogsDropped int
	CloseErrs   []string
	Violations  []Violation
	Baseline    *BaselineResult
	// Account is where the tokens of Burst + Rate*T went, summed over the
	// tenants, with T = AccountT (the workload, Close excluded); nil but
	// for the tight scenario. Classes and tenants have their own.
	Account  *Account
	AccountT time.Duration
}

// Counts are decision counts. Admitted counts admissions paid with leased
// tokens, the ones the bound covers; Degraded counts admissions without a
// lease (the fallback and fail-open modes while Redis is unreachable);
// Unavailable counts denials by a failure mode (degraded denials).
type Counts struct {
	Offered     int64 // decisions asked for
	Admitted    int64
	Denied      int64 // denied for lack of quota (or cold start)
	Unavailable int64
	Degraded    int64
}

func (c *Counts) add(o Counts) {
	c.Offered += o.Offered
	c.Admitted += o.Admitted
	c.Denied += o.Denied
	c.Unavailable += o.Unavailable
	c.Degraded += o.Degraded
}

// TenantResult is one tenant's outcome over all instances.
type TenantResult struct {
	Name  string
	Class int
	Rate  float64
	Burst int64
	Counts
	Bound        float64 // Burst + Rate*T, T = Result.BoundT()
	Ideal        float64 // what one exact global token bucket would have admitted of the same requests
	WindowExcess float64 // worst window's admitted minus Burst + Rate*(W + L); <= 0 when the bound held
	WindowFrom   time.Duration
	WindowTo     time.Duration
	LeaseCalls   int64    // lease script runs for the tenant during the workload (acquire and release; the final Close's excluded)
	Account      *Account // nil but for the tight scenario
}

// ClassResult aggregates the tenants of one class.
type ClassResult struct {
	Name    string
	Tier    string
	Pattern string
	Tenants int
	Rate    float64 // per tenant
	Burst   int64   // per tenant
	Counts
	Bound         float64 // sum over tenants
	Ideal         float64 // sum over tenants
	Utilization   float64 // Admitted / Ideal, 0..1 (or a little above: see Ideal)
	OverAdmission int64   // sum over tenants of admitted above the bound
	LeaseCalls    int64
	CallsPer1k    float64 // lease script runs per 1,000 decisions
	MeanLease     float64 // mean lease size per instance, tokens
	P50, P99      time.Duration
	Account       *Account // the sum of its tenants'; nil but for the tight scenario
}

// InstanceResult is one instance's decisions.
type InstanceResult struct {
	Slot        int
	Start, Stop time.Duration
	Offered     int64 // decisions
	Admitted    int64 // with or without a lease
	// OverOffered and OverAdmitted count, for each half of the run, the
	// decisions of the tenants whose demand is always above their quota
	// (pattern "over"): how fairly a global quota is shared between
	// instances that see different traffic.
	OverOffered, OverAdmitted [2]int64
}

// Totals are the whole run's numbers.
type Totals struct {
	Counts
	Decisions       int64 // = Offered
	DecisionsPerSec float64
	RoundTrips      int64 // Redis round trips during the workload (a pipeline counts once)
	Scripts         int64 // lease script runs during the workload (one per tenant, a call of a batch counting once for each of its tenants)
	Evals           int64 // every script run (EVAL, EVALSHA) the instances sent during the workload
	CloseRoundTrips int64 // round trips of the final Close calls (returning leases)
	RoundTripsPer1k float64
	P50, P99        time.Duration
	Samples         int
	// RedisCPU is the CPU time (user + system) the Redis server used
	// during the workload, from INFO cpu before and after it; HasCPU is
	// false when it could not be read (the embedded Redis). It counts
	// every client of the server, not only the simulation's.
	RedisCPU time.Duration
	HasCPU   bool
}

// CPUPerDecision is the Redis CPU time per decision in nanoseconds, and
// whether it is known.
func (t Totals) CPUPerDecision() (float64, bool) {
	return cpuPerDecision(t.RedisCPU, t.HasCPU, t.Decisions)
}

func cpuPerDecision(cpu time.Duration, ok bool, decisions int64) (float64, bool) {
	if !ok || decisions <= 0 {
		return 0, false
	}
	return float64(cpu) / float64(decisions), true
}

// CPUPerAdmitted is the Redis CPU time per admitted request (with a lease)
// in nanoseconds, and whether it is known: the fleet scenario's headline.
func (t Totals) CPUPerAdmitted() (float64, bool) {
	return cpuPerDecision(t.RedisCPU, t.HasCPU, t.Admitted)
}

// Series are the time series the report charts, one value per bucket of
// Step.
type Series struct {
	ClassOffered  [][]int64   // [class][bucket] decisions
	ClassAdmitted [][]int64   // [class][bucket] admissions (leased)
	ClassDegraded [][]int64   // [class][bucket] admissions without a lease
	ClassLease    [][]float64 // [class][bucket] mean lease per instance; NaN when not sampled
	SlotAdmitted  [][]int64   // [slot][bucket] admissions through each instance, with or without a lease
	RoundTrips    []int64     // [bucket]
	Scripts       []int64     // [bucket]
	Errors        []int64     // [bucket] failed lease calls
	Evals         []int64     // [bucket] script runs (EVAL, EVALSHA), all scripts
	// RedisCPU is the Redis server's CPU time per bucket (INFO cpu, user
	// + system), in seconds; nil when not measured (the embedded Redis).
	RedisCPU []float64
}

// Violation is a tenant that admitted more than the bound allows.
type Violation struct {
	Tenant   string
	Kind     string // "total": Burst + Rate*T; "window": Burst + Rate*(W + L)
	Admitted float64
	Bound    float64
	From, To time.Duration
}

// workload is the workload's length, WorkT, or, when that was not
// recorded, the nominal Run: the window of the Redis traffic and CPU the
// simulation counted (read once every request goroutine had stopped).
func (r *Result) workload() time.Duration {
	if r.WorkT > 0 {
		return r.WorkT
	}
	return r.Run
}

// BoundT is T of the bound B + r*T: the workload (WorkT), or, when that
// was not recorded, the run to the last Close.
func (r *Result) BoundT() time.Duration {
	if r.WorkT > 0 {
		return r.WorkT
	}
	return r.Elapsed
}

// BoundOK reports whether every tenant stayed within the bound.
func (r *Result) BoundOK() bool { return len(r.Violations) == 0 }

// result computes the Result after the run ended at end.
func (r *runner) result(end time.Time, calls *callSeries) *Result {
	w := r.w
	nb, nt, nc := r.nb, len(w.Tenants), len(w.Classes)
	res := &Result{
		Config:   r.cfg,
		Redis:    r.be.Label,
		Started:  r.start,
		Run:      r.cfg.Duration,
		Elapsed:  end.Sub(r.start),
		WorkT:    r.workT,
		Step:     r.step,
		Events:   w.Events(),
		Slots:    w.Slots(),
		LeaseTTL: r.cfg.LeaseTTL,
		WindowL:  r.cfg.windowL(),
	}
	// Per tenant series over all instances, per slot admissions.
	off := make([][]int64, nt)
	adm := make([][]int64, nt)
	deg := make([][]int64, nt)
	for i := range off {
		off[i], adm[i], deg[i] = make([]int64, nb), make([]int64, nb), make([]int64, nb)
	}
	counts := make([]Counts, nt)
	lat := make([][]time.Duration, nc)
	modes := map[string]int64{}
	res.Series.SlotAdmitted = make([][]int64, len(r.insts))
	for s, inst := range r.insts {
		res.Series.SlotAdmitted[s] = make([]int64, nb)
		ir := InstanceResult{Slot: s, Start: w.Slots()[s].Start, Stop: w.Slots()[s].Stop}
		for _, ws := range inst.workers {
			for k, ti := range ws.tenants {
				for b := 0; b < nb; b++ {
					o := int64(ws.off[k*nb+b])
					a := int64(ws.adm[k*nb+b]) + int64(ws.deg[k*nb+b])
					ir.Offered += o
					ir.Admitted += a
					if w.Tenants[ti].Pattern == patOver {
						half := min(2*b/nb, 1)
						ir.OverOffered[half] += o
						ir.OverAdmitted[half] += a
					}
				}
				for b := 0; b < nb; b++ {
					o, a, g := int64(ws.off[k*nb+b]), int64(ws.adm[k*nb+b]), int64(ws.deg[k*nb+b])
					off[ti][b] += o
					adm[ti][b] += a
					deg[ti][b] += g
					counts[ti].Offered += o
					counts[ti].Admitted += a
					counts[ti].Degraded += g
				}
				counts[ti].Denied += ws.denied[k]
				counts[ti].Unavailable += ws.unavail[k]
			}
			for b, a := range ws.all {
				res.Series.SlotAdmitted[s][b] += int64(a)
			}
			for m, n := range ws.modes {
				if n > 0 {
					modes[leasequota.FailureMode(m).String()] += n
				}
			}
			for ci := range ws.lat {
				lat[ci] = append(lat[ci], ws.lat[ci]...)
			}
		}
		res.Instances = append(res.Instances, ir)
		res.Lib.Calls += inst.stats.Calls
		res.Lib.Errors += inst.stats.Errors
		res.Lib.Requested += inst.stats.Requested
		res.Lib.Granted += inst.stats.Granted
		res.Lib.Returned += inst.stats.Returned
		if inst.closeErr != nil {
			res.CloseErrs = append(res.CloseErrs, fmt.Sprintf("instance %d: %s", s, summarizeErr(inst.closeErr)))
		}
	}
	res.Modes = modes
	res.Logs, res.LogsDropped = r.logs.Lines()
	T := res.BoundT().Seconds()
	L := r.cfg.windowL()
	res.Tenants = make([]TenantResult, nt)
	if r.ledger != nil {
		r.ledger.finish()
	}
	for i, t := range w.Tenants {
		tr := TenantResult{
			Name: t.Name, Class: t.Class, Rate: t.Quota.Rate, Burst: t.Quota.Burst,
			Counts: counts[i],
			Bound:  float64(t.Quota.Burst) + t.Quota.Rate*T,
			Ideal:  idealAdmitted(off[i], t.Quota.Rate, t.Quota.Burst, r.step),
		}
		if i < len(r.scripts) {
			tr.LeaseCalls = r.scripts[i]
		}
		ex, from, to := worstWindow(adm[i], t.Quota.Rate, t.Quota.Burst, r.step, L)
		tr.WindowExcess, tr.WindowFrom, tr.WindowTo = ex, from, to
		if float64(tr.Admitted) > tr.Bound {
			res.Violations = append(res.Violations, Violation{Tenant: t.Name, Kind: "total",
				Admitted: float64(tr.Admitted), Bound: tr.Bound, From: 0, To: res.BoundT()})
		}
		if ex > 0 {
			wlen := (to - from).Seconds()
			bound := float64(t.Quota.Burst) + t.Quota.Rate*(wlen+L.Seconds())
			res.Violations = append(res.Violations, Violation{Tenant: t.Name, Kind: "window",
				Admitted: bound + ex, Bound: bound, From: from, To: to})
		}
		if r.ledger != nil {
			denied := make([]bool, nb)
			for b := range denied {
				denied[b] = off[i][b] > adm[i][b]+deg[i][b]
			}
			a := r.ledger.account(i, r.accountT.Seconds(), denied, tr.Admitted, r.held[i])
			tr.Account = &a
		}
		res.Tenants[i] = tr
	}
	if r.ledger != nil {
		res.Account, res.AccountT = &Account{}, r.accountT
	}

	// Classes.
	res.Series.ClassOffered = make([][]int64, nc)
	res.Series.ClassAdmitted = make([][]int64, nc)
	res.Series.ClassDegraded = make([][]int64, nc)
	res.Series.ClassLease = make([][]float64, nc)
	var all []time.Duration
	for ci, c := range w.Classes {
		cr := ClassResult{Name: c.Name, Tier: c.Tier, Pattern: c.Pattern.String(), Tenants: len(c.Tenants), Rate: c.Rate, Burst: c.Burst}
		so, sa, sd := make([]int64, nb), make([]int64, nb), make([]int64, nb)
		for _, ti := range c.Tenants {
			tr := &res.Tenants[ti]
			cr.Counts.add(tr.Counts)
			cr.Bound += tr.Bound
			cr.Ideal += tr.Ideal
			cr.OverAdmission += max(0, int64(math.Ceil(float64(tr.Admitted)-tr.Bound)))
			cr.LeaseCalls += tr.LeaseCalls
			if tr.Account != nil {
				if cr.Account == nil {
					cr.Account = &Account{}
				}
				cr.Account.add(tr.Account)
			}
			for b := 0; b < nb; b++ {
				so[b] += off[ti][b]
				sa[b] += adm[ti][b]
				sd[b] += deg[ti][b]
			}
		}
		if cr.Ideal > 0 {
			cr.Utilization = float64(cr.Admitted) / cr.Ideal
		}
		if cr.Offered > 0 {
			cr.CallsPer1k = 1000 * float64(cr.LeaseCalls) / float64(cr.Offered)
		}
		sl := make([]float64, nb)
		var leaseSum float64
		var leaseN int
		for b := 0; b < nb; b++ {
			var sum float64
			var n int32
			for _, inst := range r.insts {
				sum += inst.leaseSum[ci*nb+b]
				n += inst.leaseN[ci*nb+b]
			}
			if n == 0 {
				sl[b] = math.NaN()
				continue
			}
			sl[b] = sum / float64(n)
			leaseSum += sl[b]
			leaseN++
		}
		if leaseN > 0 {
			cr.MeanLease = leaseSum / float64(leaseN)
		}
		cr.P50, cr.P99 = percentile(lat[ci], 0.50), percentile(lat[ci], 0.99)
		if cr.Account != nil {
			cr.Account.OffHeld = r.offHeld(ci, len(c.Tenants))
			res.Account.add(cr.Account)
			res.Account.OffHeld += cr.Account.OffHeld
		}
		all = append(all, lat[ci]...)
		res.Series.ClassOffered[ci], res.Series.ClassAdmitted[ci], res.Series.ClassDegraded[ci], res.Series.ClassLease[ci] = so, sa, sd, sl
		res.Classes = append(res.Classes, cr)
	}

	// Totals.
	tot := &res.Total
	for _, c := range res.Classes {
		tot.Counts.add(c.Counts)
	}
	tot.Decisions = tot.Offered
	tot.DecisionsPerSec = float64(tot.Decisions) / r.cfg.Duration.Seconds()
	tot.RoundTrips = calls.roundTrips[nb]
	tot.Scripts = calls.scripts[nb]
	tot.Evals = calls.evals[nb]
	tot.CloseRoundTrips = r.totalRoundTrips() - tot.RoundTrips
	if tot.Decisions > 0 {
		tot.RoundTripsPer1k = 1000 * float64(tot.RoundTrips) / float64(tot.Decisions)
	}
	tot.P50, tot.P99 = percentile(all, 0.50), percentile(all, 0.99)
	tot.Samples = len(all)
	tot.RedisCPU, tot.HasCPU = r.cpu, r.cpuOK
	res.Series.RoundTrips = make([]int64, nb)
	res.Series.Scripts = make([]int64, nb)
	res.Series.Errors = make([]int64, nb)
	res.Series.Evals = make([]int64, nb)
	if calls.cpuOK && tot.HasCPU {
		res.Series.RedisCPU = make([]float64, nb)
	}
	for b := 0; b < nb; b++ {
		res.Series.RoundTrips[b] = calls.roundTrips[b+1] - calls.roundTrips[b]
		res.Series.Scripts[b] = calls.scripts[b+1] - calls.scripts[b]
		res.Series.Errors[b] = calls.errors[b+1] - calls.errors[b]
		res.Series.Evals[b] = calls.evals[b+1] - calls.evals[b]
		if res.Series.RedisCPU != nil {
			res.Series.RedisCPU[b] = time.Duration(calls.cpu[b+1] - calls.cpu[b]).Seconds()
		}
	}
	return res
}

// percentile returns the p-quantile (0..1) of samples, nearest rank; 0
// for none.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// idealAdmitted is what a single exact token bucket (burst, rate),
// starting full, admits of the requests offered per bucket of step, the
// requests of a bucket spread evenly over it. It is the denominator of
// utilization: a perfect central limiter. Within a bucket such a bucket
// admits what it held plus what it refills meanwhile (it only reaches
// Burst, and stops refilling, when the requests come slower than Rate, and
// then it admits them all); so over a steady demand above the rate it
// admits Burst + Rate*T, whatever the step.
func idealAdmitted(offered []int64, rate float64, burst int64, step time.Duration) float64 {
	tokens := float64(burst)
	refill := rate * step.Seconds()
	var admitted float64
	for _, o := range offered {
		a := math.Min(float64(o), math.Floor(tokens+refill))
		tokens = math.Min(float64(burst), tokens+refill-a)
		admitted += a
	}
	return admitted
}

// worstWindow finds the window of whole buckets whose admissions most
// exceed Burst + Rate*(W + L), W being the window's length. It returns the
// excess (<= 0 when the bound held everywhere) and the window. O(n): with
// S the prefix sums, the excess of buckets [i, j) is
// (S[j] - r*step*j) - (S[i] - r*step*i) - B - r*L.
func worstWindow(adm []int64, rate float64, burst int64, step, L time.Duration) (float64, time.Duration, time.Duration) {
	rs := rate * step.Seconds()
	best := math.Inf(-1)
	bi, bj := 0, 0
	var S float64
	minF, minI := 0.0, 0 // min over i <= j of S[i] - rs*i
	for j := 1; j <= len(adm); j++ {
		S += float64(adm[j-1])
		f := S - rs*float64(j)
		if ex := f - minF; ex > best {
			best, bi, bj = ex, minI, j
		}
		if f < minF {
			minF, minI = f, j
		}
	}
	if len(adm) == 0 {
		return -float64(burst), 0, 0
	}
	return best - float64(burst) - rate*L.Seconds(), time.Duration(bi) * step, time.Duration(bj) * step
}

// summarizeErr shortens a joined error (one line per tenant) to its first
// line and a count.
func summarizeErr(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return fmt.Sprintf("%s (and %d more errors)", lines[0], len(lines)-1)
}
