package main

// The account of issue #16: where every token of a tenant's Burst +
// Rate*T went. The simulator follows each tenant's global bucket through
// the replies of the lease scripts that its instances' Redis clients see
// (the go-redis hook of callCounter): an acquire's reply gives the tokens
// left in the bucket after it and the bucket's time, a release's the
// same and how many of the returned tokens Redis credited. Between two
// calls the bucket refills at Rate up to Burst, so what it refilled past
// Burst (the spill) is exact when every reply is seen. Tokens of Burst +
// Rate*T end up admitted, spilled, forfeited (given back, not credited),
// held in a lease at the end, or in the bucket at the end; what the
// replies cannot explain (a call that timed out after its script ran, a
// reply too far out of order) is the account's residual, Unaccounted.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/lease"
)

// Account is where the tokens of one tenant's (or a class's) Burst +
// Rate*T went over the workload: T runs from the start to the moment
// every request goroutine had stopped (the final Close is not in it).
// The first eight fields after Bound add up to Bound.
type Account struct {
	Bound    float64 // Burst + Rate*T
	Admitted float64 // admitted with a lease
	// The spill is what the bucket refilled past Burst, split by what the
	// tenant's requests were doing then, per series bucket (Result.Step):
	// SpillIdle when none was denied in that bucket (no unmet demand); the
	// others when some were, by the gap between the two calls on the
	// bucket around the spill: SpillLate when it was longer than lateGaps
	// refresh intervals (no instance called on schedule), SpillPartial when
	// the call that opened it was a partial grant (it emptied the bucket and
	// its instance wanted more), SpillBetween otherwise (the calls came on
	// schedule, the bucket filled faster than they came).
	SpillIdle, SpillLate, SpillPartial, SpillBetween float64
	Forfeited                                        float64 // given back during the run (expiry, eviction) and not credited by Redis
	Held                                             float64 // unspent in the instances' leases at the end
	Bucket                                           float64 // left in the global bucket at the end
	// Unaccounted is Bound less all of the above: the effect of the script
	// runs whose replies were not seen (Unseen, Dropped) and of the few
	// milliseconds between reading Held and closing the account.
	Unaccounted float64

	// Not part of the sum.
	Returned  float64 // tokens given back during the run, credited or not
	Acquires  int64   // acquire script runs whose reply was seen
	Partials  int64   // of them, those that granted fewer tokens than asked for
	Unseen    int64   // script calls on the bucket without a reply (failed or timed out)
	Dropped   int64   // replies that came too far out of order to follow the bucket
	OffHeld   float64 // mean tokens held by onOffSlot while idle (tight tenants)
	gapCounts []int64 // gaps between successive calls on the bucket, gapBin wide
}

// Spill is the whole spill.
func (a *Account) Spill() float64 {
	return a.SpillIdle + a.SpillLate + a.SpillPartial + a.SpillBetween
}

// Lost is the part of Bound that was neither admitted nor left at the
// end (in a lease or the bucket): the spill while requests were denied
// and the forfeited returns.
func (a *Account) Lost() float64 {
	return a.SpillLate + a.SpillPartial + a.SpillBetween + a.Forfeited
}

// Gap returns the p-quantile (0..1) of the gaps between successive calls
// on the bucket, and false when there were none.
func (a *Account) Gap(p float64) (time.Duration, bool) {
	var n int64
	for _, c := range a.gapCounts {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	rank := int64(math.Ceil(p * float64(n)))
	for i, c := range a.gapCounts {
		rank -= c
		if rank <= 0 {
			return time.Duration(i) * gapBin, true
		}
	}
	return time.Duration(len(a.gapCounts)-1) * gapBin, true
}

func (a *Account) add(o *Account) {
	a.Bound += o.Bound
	a.Admitted += o.Admitted
	a.SpillIdle += o.SpillIdle
	a.SpillLate += o.SpillLate
	a.SpillPartial += o.SpillPartial
	a.SpillBetween += o.SpillBetween
	a.Forfeited += o.Forfeited
	a.Held += o.Held
	a.Bucket += o.Bucket
	a.Unaccounted += o.Unaccounted
	a.Returned += o.Returned
	a.Acquires += o.Acquires
	a.Partials += o.Partials
	a.Unseen += o.Unseen
	a.Dropped += o.Dropped
	if len(o.gapCounts) > 0 && len(a.gapCounts) == 0 {
		a.gapCounts = make([]int64, gapBins)
	}
	for i, c := range o.gapCounts {
		a.gapCounts[i] += c
	}
}

const (
	// lateGaps: a spill whose calls were more than lateGaps refresh
	// intervals apart is SpillLate.
	lateGaps = 2
	// gapBin and gapBins size the histogram of call gaps: 1 ms bins, the
	// last one for every gap of 2 s or more.
	gapBin  = time.Millisecond
	gapBins = 2001
	// A tenant's replies are kept until foldEvery of them are waiting,
	// then the bucket is followed through those older than the newest by
	// foldLag, in the bucket's time order. A reply older than what was
	// followed already is Dropped.
	foldEvery = 512
	foldLag   = 2 * time.Second
)

// The spill kinds a ledger tells apart; SpillIdle is decided later, from
// the denials.
const (
	spillLate = iota
	spillPartial
	spillBetween
	numSpill
)

// bucketEvent is a script reply on one tenant's bucket.
type bucketEvent struct {
	at       int64   // the bucket's time of the call, Unix µs
	tokens   float64 // in the bucket after the call
	want     int64   // acquire: tokens asked for
	granted  int64   // acquire: tokens granted
	amount   int64   // release: tokens given back
	credited float64 // release: of them, credited
	release  bool
}

// bucketLedger follows every tenant's bucket through the replies.
type bucketLedger struct {
	start    int64 // the run's start, Unix µs
	step     int64 // series bucket width, µs
	nb       int
	late     int64        // a gap longer than this (µs) is late
	endAt    atomic.Int64 // Unix µs when the account closed, 0 while open
	keyIndex map[string]int
	tenants  []tenantLedger
}

// tenantLedger is one tenant's bucket as followed so far.
type tenantLedger struct {
	mu      sync.Mutex
	rate    float64 // tokens per µs
	burst   float64
	pending []bucketEvent
	newest  int64
	// The bucket after the last event followed (the run's start, full,
	// before any), and whether that event was a partial grant.
	at      int64
	tokens  float64
	called  bool
	partial bool
	end     float64 // the bucket at the end, set by close

	spill                               [numSpill][]float64 // per series bucket
	returned, forfeited                 float64
	acquires, partials, unseen, dropped int64
	gaps                                []int64
}

// newBucketLedger returns a ledger of w's tenants; begin starts it.
func newBucketLedger(w *workload, keyIndex map[string]int, step time.Duration, nb int, refresh time.Duration) *bucketLedger {
	l := &bucketLedger{step: step.Microseconds(), nb: nb,
		late: (lateGaps * refresh).Microseconds(), keyIndex: keyIndex, tenants: make([]tenantLedger, len(w.Tenants))}
	for i, t := range w.Tenants {
		tl := &l.tenants[i]
		tl.rate, tl.burst = t.Quota.Rate/1e6, float64(t.Quota.Burst)
		for k := range tl.spill {
			tl.spill[k] = make([]float64, nb)
		}
		tl.gaps = make([]int64, gapBins)
	}
	return l
}

// begin starts the account at the run's start, every bucket full (a
// fresh key prefix: no bucket exists yet). Before any call.
func (l *bucketLedger) begin(start time.Time) {
	l.start = start.UnixMicro()
	for i := range l.tenants {
		tl := &l.tenants[i]
		tl.at, tl.tokens = l.start, tl.burst
	}
}

// observe reads a command's reply after it ran. Only lease scripts on a
// tenant's bucket count: EVAL or EVALSHA with 3 keys per tenant (bucket,
// registry or dedup set, override), the same number of arguments per
// tenant (acquire.lua's 8, want the third, or release.lua's, amount the
// third), and a reply that lease.ParseAcquireReply or
// lease.ParseReleaseReply reads, or, for a batch, one such reply per
// tenant.
func (l *bucketLedger) observe(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 6 {
		return
	}
	name, _ := args[0].(string)
	if !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return
	}
	numkeys, ok := args[2].(int)
	if !ok || numkeys < 3 || numkeys%3 != 0 || len(args) < 3+numkeys {
		return
	}
	keys, argv := args[3:3+numkeys], args[3+numkeys:]
	n := numkeys / 3
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return // the script did not run; the client runs it again by EVAL
	}
	var reply interface{}
	if c, ok := cmd.(*redis.Cmd); ok && c.Err() == nil {
		reply = c.Val()
	}
	batch, _ := reply.([]interface{})
	if n > 1 && len(batch) != n {
		reply = nil
	}
	for k := 0; k < n; k++ {
		key, _ := keys[3*k].(string)
		ti, ok := l.keyIndex[key]
		if !ok {
			continue
		}
		v := reply
		if n > 1 && reply != nil {
			v = batch[k]
		}
		e, ok := parseEvent(v, argv, len(argv)/n*k)
		if !ok {
			l.tenants[ti].note(func(tl *tenantLedger) { tl.unseen++ })
			continue
		}
		l.record(ti, e)
	}
}

// parseEvent reads one tenant's reply v; o is the offset of its arguments
// in argv.
func parseEvent(v interface{}, argv []interface{}, o int) (bucketEvent, bool) {
	var e bucketEvent
	n, ok := argInt(argv, o+2) // want, or amount
	if !ok || v == nil {
		return e, false
	}
	if g, err := lease.ParseAcquireReply(v, n); err == nil {
		e.granted, e.tokens, e.at, e.want = g.Granted, g.Tokens, g.ServerTime.UnixMicro(), n
		return e, true
	}
	r, err := lease.ParseReleaseReply(v, n)
	if err != nil {
		return e, false
	}
	e.release = true
	e.tokens, e.at, e.credited, e.amount = r.Tokens, r.ServerTime.UnixMicro(), r.Credited, n
	return e, true
}

// argInt reads argument i of a script call, as the lease client formats
// it (an integer, or its decimal string).
func argInt(argv []interface{}, i int) (int64, bool) {
	if i >= len(argv) {
		return 0, false
	}
	switch x := argv[i].(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func (tl *tenantLedger) note(f func(*tenantLedger)) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	f(tl)
}

// record adds a reply of tenant ti's bucket, unless the account closed
// before its time.
func (l *bucketLedger) record(ti int, e bucketEvent) {
	if end := l.endAt.Load(); end != 0 && e.at > end {
		return
	}
	tl := &l.tenants[ti]
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if e.at <= tl.at {
		tl.dropped++
		tl.flows(e)
		return
	}
	tl.pending = append(tl.pending, e)
	tl.newest = max(tl.newest, e.at)
	if len(tl.pending) >= foldEvery {
		l.fold(tl, tl.newest-foldLag.Microseconds())
	}
}

// flows counts what an event gives back and what it grants.
func (tl *tenantLedger) flows(e bucketEvent) {
	if e.release {
		tl.returned += float64(e.amount)
		tl.forfeited += float64(e.amount) - e.credited
		return
	}
	tl.acquires++
	if e.granted < e.want {
		tl.partials++
	}
}

// fold follows the bucket through the pending events up to time upTo, in
// time order. Called with tl.mu held.
func (l *bucketLedger) fold(tl *tenantLedger, upTo int64) {
	slices.SortFunc(tl.pending, func(a, b bucketEvent) int { return int(min(max(a.at-b.at, -1), 1)) })
	i := 0
	for ; i < len(tl.pending) && tl.pending[i].at <= upTo; i++ {
		e := tl.pending[i]
		gap := e.at - tl.at
		l.spillUntil(tl, e.at)
		if tl.called {
			tl.gaps[min(gap/gapBin.Microseconds(), gapBins-1)]++
		}
		tl.at, tl.tokens, tl.called = e.at, e.tokens, true
		tl.partial = !e.release && e.granted < e.want
		tl.flows(e)
	}
	tl.pending = append(tl.pending[:0], tl.pending[i:]...)
}

// spillUntil adds what the bucket refilled past its burst from the last
// event followed until to, by kind, to the series buckets it fell in.
func (l *bucketLedger) spillUntil(tl *tenantLedger, to int64) {
	if to <= tl.at || tl.rate <= 0 {
		return
	}
	if tl.tokens+tl.rate*float64(to-tl.at) <= tl.burst {
		return
	}
	full := float64(tl.at) + math.Max(0, tl.burst-tl.tokens)/tl.rate
	kind := spillBetween
	switch {
	case to-tl.at > l.late:
		kind = spillLate
	case tl.partial:
		kind = spillPartial
	}
	l.spread(tl.spill[kind], full, float64(to), tl.rate)
}

// spread adds rate per µs over [from, to) (Unix µs) to the series buckets
// it covers; time before the first bucket counts in the first, after the
// last in the last.
func (l *bucketLedger) spread(series []float64, from, to, rate float64) {
	b0 := l.bucketOf(from)
	b1 := l.bucketOf(to)
	for b := b0; b <= b1; b++ {
		lo, hi := from, to
		if b > b0 {
			lo = float64(l.start + int64(b)*l.step)
		}
		if b < b1 {
			hi = float64(l.start + int64(b+1)*l.step)
		}
		if hi > lo {
			series[b] += rate * (hi - lo)
		}
	}
}

func (l *bucketLedger) bucketOf(t float64) int {
	b := int(math.Floor((t - float64(l.start)) / float64(l.step)))
	return min(max(b, 0), l.nb-1)
}

// close ends the account at end: replies of later calls are ignored.
func (l *bucketLedger) close(end time.Time) { l.endAt.Store(end.UnixMicro()) }

// finish follows every tenant's bucket up to the end, once every reply
// of a call before it has come in (after the run).
func (l *bucketLedger) finish() {
	at := l.endAt.Load()
	for i := range l.tenants {
		tl := &l.tenants[i]
		tl.mu.Lock()
		l.fold(tl, at)
		tl.pending = tl.pending[:0]
		l.spillUntil(tl, at)
		tl.end = tl.tokens
		if at > tl.at {
			tl.end = math.Min(tl.burst, tl.tokens+tl.rate*float64(at-tl.at))
		}
		tl.mu.Unlock()
	}
}

// account is tenant ti's account once the ledger closed, T long: denied
// says, per series bucket, whether some of its requests were denied then;
// admitted and held are counted by the runner.
func (l *bucketLedger) account(ti int, T float64, denied []bool, admitted, held int64) Account {
	tl := &l.tenants[ti]
	tl.mu.Lock()
	defer tl.mu.Unlock()
	a := Account{
		Bound:     tl.burst + tl.rate*1e6*T,
		Admitted:  float64(admitted),
		Held:      float64(held),
		Bucket:    tl.end,
		Forfeited: tl.forfeited,
		Returned:  tl.returned,
		Acquires:  tl.acquires, Partials: tl.partials, Unseen: tl.unseen, Dropped: tl.dropped,
		gapCounts: slices.Clone(tl.gaps),
	}
	for b := 0; b < l.nb; b++ {
		s := tl.spill[spillLate][b] + tl.spill[spillPartial][b] + tl.spill[spillBetween][b]
		if !denied[b] {
			a.SpillIdle += s
			continue
		}
		a.SpillLate += tl.spill[spillLate][b]
		a.SpillPartial += tl.spill[spillPartial][b]
		a.SpillBetween += tl.spill[spillBetween][b]
	}
	a.Unaccounted = a.Bound - a.Admitted - a.Spill() - a.Forfeited - a.Held - a.Bucket
	return a
}

// heldTokens sums, per tenant, the leased tokens the running instances
// hold now.
func (r *runner) heldTokens() []int64 {
	held := make([]int64, len(r.w.Tenants))
	for _, inst := range r.insts {
		lim := inst.lim.Load()
		if lim == nil || r.w.Slots()[inst.slot].Stop < r.cfg.Duration {
			continue // not started, or closed: its leases were returned
		}
		for i, t := range r.w.Tenants {
			if info, ok := lim.Tenant(t.Name); ok {
				held[i] += info.Tokens
			}
		}
	}
	return held
}

// closeAccount ends the account now: it reads the leases held, then
// closes the ledger. A grant whose script ran just before that but whose
// reply had not reached its limiter is missing from the leases held: it
// shows as unaccounted.
func (r *runner) closeAccount() {
	if r.ledger == nil {
		return
	}
	r.held = r.heldTokens()
	r.ledger.close(time.Now())
	r.accountT = time.Duration(r.ledger.endAt.Load()-r.ledger.start) * time.Microsecond
}

// offHeld is the mean of the leased tokens that onOffSlot held for class
// ci's tenants (summed over them) in the series buckets whose middle fell
// in its idle phases; 0 for a class that is not tight.
func (r *runner) offHeld(ci, tenants int) float64 {
	if len(r.insts) <= onOffSlot || !r.w.Tenants[r.w.Classes[ci].Tenants[0]].Tight {
		return 0
	}
	inst := r.insts[onOffSlot]
	var sum float64
	var n int32
	for b := 0; b < r.nb; b++ {
		if onPhase(time.Duration(b)*r.step + r.step/2) {
			continue
		}
		sum += inst.heldSum[ci*r.nb+b]
		n += inst.leaseN[ci*r.nb+b]
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n) * float64(tenants)
}

// accountHeader and accountRows are the account table, in % of Burst +
// Rate*T (the class's sum), the text table and the report alike.
var accountHeader = []string{"class", "B+r·T", "admitted", "spill:idle", "spill:late", "spill:partial", "spill:between", "forfeited", "held", "bucket", "unaccounted"}

func accountRows(res *Result) [][]string {
	var rows [][]string
	row := func(name string, a *Account) []string {
		p := func(x float64) string {
			if a.Bound <= 0 {
				return "-"
			}
			return pct(x / a.Bound)
		}
		return []string{name, group(int64(math.Round(a.Bound))), p(a.Admitted), p(a.SpillIdle), p(a.SpillLate), p(a.SpillPartial),
			p(a.SpillBetween), p(a.Forfeited), p(a.Held), p(a.Bucket), p(a.Unaccounted)}
	}
	for _, c := range res.Classes {
		if c.Account != nil {
			rows = append(rows, row(c.Name, c.Account))
		}
	}
	if res.Account != nil {
		rows = append(rows, row("all", res.Account))
	}
	return rows
}

// accountDiagHeader and accountDiagRows are the account's second table:
// how the tenants used their buckets.
var accountDiagHeader = []string{"class", "calls/1k", "acquires", "partial", "gap p50", "gap p99", "fill B/r", "returned", "held idle", "unseen"}

func accountDiagRows(res *Result) [][]string {
	var rows [][]string
	for _, c := range res.Classes {
		a := c.Account
		if a == nil {
			continue
		}
		gap := func(p float64) string {
			d, ok := a.Gap(p)
			if !ok {
				return "-"
			}
			if d >= time.Duration(gapBins-1)*gapBin {
				return ">=" + fmtDur(d)
			}
			return fmtDur(d)
		}
		partial := "-"
		if a.Acquires > 0 {
			partial = pct(float64(a.Partials) / float64(a.Acquires))
		}
		held := "-"
		if a.OffHeld > 0 {
			held = fmt.Sprintf("%.1f", a.OffHeld)
		}
		rows = append(rows, []string{c.Name, fmt.Sprintf("%.1f", c.CallsPer1k), group(a.Acquires), partial, gap(0.5), gap(0.99),
			fmtDur(time.Duration(float64(c.Burst) / c.Rate * float64(time.Second))), group(int64(math.Round(a.Returned))), held,
			group(a.Unseen + a.Dropped)})
	}
	return rows
}

// writeAccountTable prints the account and how to read it.
func writeAccountTable(out io.Writer, res *Result) {
	fmt.Fprintf(out, "where the tokens of Burst + Rate*T went (issue #16), T = %.2fs (the workload, Close excluded),\n", res.AccountT.Seconds())
	fmt.Fprintln(out, "in % of the class's Burst + Rate*T; the columns after it add up to 100%:")
	fmt.Fprintln(out)
	writeCells(out, append([][]string{accountHeader}, accountRows(res)...))
	fmt.Fprintln(out)
	writeCells(out, append([][]string{accountDiagHeader}, accountDiagRows(res)...))
	fmt.Fprintln(out)
	for _, l := range accountNotes(res.Step) {
		fmt.Fprintln(out, l)
	}
}

// accountNotes say how each column is computed; step is the series'
// bucket width (Result.Step), the spill's unit of time.
func accountNotes(step time.Duration) []string {
	return []string{
		"admitted: requests admitted with a lease. The bucket is followed through every lease script reply",
		"  (tokens left, bucket time; a release's credit); between calls it refills at Rate up to Burst.",
		fmt.Sprintf("spill: what it refilled past Burst (exact when every reply is seen), by %v step: idle when no", step),
		fmt.Sprintf("  request of the tenant was denied in that step; else late when the calls around it were > %d x -refresh", lateGaps),
		"  apart, partial when the call before it granted less than asked, between otherwise (calls on schedule).",
		"forfeited: given back during the run (expired or evicted leases) and not credited by Redis.",
		"held: unspent in the instances' leases at the end; bucket: left in the bucket at the end.",
		"unaccounted: the rest: calls whose replies were not seen (unseen: timed out, failed, out of order).",
		"calls/1k: lease script runs per 1,000 decisions; partial: acquires granted less than asked; gap: between",
		fmt.Sprintf("  successive calls on a bucket; fill B/r: an empty bucket's time to full; held idle: mean tokens instance %d", onOffSlot),
		"  held for the class while idle (its off phases); returned: tokens given back during the run.",
	}
}

// writeCells prints rows as a right-aligned table, the first column
// left-aligned.
func writeCells(out io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range rows {
		cells := slices.Clone(r)
		cells[0] = fmt.Sprintf("%-14s", cells[0])
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	tw.Flush()
}

// accountTable is the account as the report shows it.
type accountTable struct {
	Header, DiagHeader []string
	Rows, DiagRows     [][]string
	T                  string
	Notes              []string
}

// accountTables is the report's account, nil when the run has none.
func accountTables(res *Result) *accountTable {
	if res.Account == nil {
		return nil
	}
	return &accountTable{Header: accountHeader, DiagHeader: accountDiagHeader, Rows: accountRows(res), DiagRows: accountDiagRows(res),
		T: fmt.Sprintf("%.2f", res.AccountT.Seconds()), Notes: accountNotes(res.Step)}
}
