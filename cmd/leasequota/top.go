package main

// top: the busiest tenants, from a bounded sample of Redis per refresh.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/leasequota/leasequota/lease"
)

const topUsage = `top [-interval D] [-n N] [-sample K] [-watch W] [-iterations N | -once]

Shows the busiest tenants fleet-wide, refreshed every -interval, from Redis
alone. It never scans the whole keyspace per refresh. Each refresh:

  - sends at most one SCAN to each master (one server: one SCAN) with
    COUNT -sample divided among the masters, continuing each master's cursor
    where the previous refresh left it, so successive refreshes walk the
    keyspace in turn (a full pass over T tenants takes up to about
    4T/-sample refreshes: a tenant has up to four keys);
  - reads the buckets that SCAN returned (at most -sample; SCAN's extra
    keys wait for the next refresh, which then may send no SCAN) and the -watch
    buckets ranked highest so far: one read-only script call each, which
    reads the bucket hash, its TTL and the override hash (2 keys).

So a refresh costs Redis at most (masters) SCAN calls looking at about
-sample keys, plus (-sample + -watch) script calls reading 2 keys each,
whatever the number of tenants. Nothing is added to the services' scripts.

Columns:
  GRANTED/S  tokens taken from the bucket per second (grants less
             credited returns) between this refresh's read of the bucket
             and the previous one: its stored level then, refilled at the
             rate up to its last update, capped at the burst, less its
             stored level now. Reads of one bucket are a refresh apart
             only while it is watched; "-" until it was read twice, or
             when the rate is not known. A lower bound when the bucket
             filled up between two lease calls.
  LEVEL      tokens in the bucket now, refilled at the rate since its last
             update ("-" when unknown)
  BURST      the bucket's capacity (the override's, else the one the
             services last wrote); FILL is LEVEL/BURST
  INSTANCES  instances that acquired within the registry window, as of
             the last registry summary (acquire.lua); DEMAND/S their
             reported demand in all
  QUOTA      "override" when one is stored (rate exact), else "services"
             (the rate estimated from the key's TTL, which every write sets
             to a second after the bucket would be full)

Tenants are ranked by GRANTED/S, or by DEMAND/S while GRANTED/S is not
known yet.

An interrupt (Ctrl-C) ends top at any moment, during a refresh or between
two, with -iterations N as without: exit status 0, or 1 when a bucket
could not be read (each such read is reported on stderr).

Flags:
`

// topRow is one tenant's line of a refresh.
type topRow struct {
	Tenant    *string  `json:"tenant"` // null when not known: a hashed key without a stored name
	Key       string   `json:"key"`
	Granted   *float64 `json:"granted_per_s"`
	Level     *float64 `json:"level"`
	Burst     *int64   `json:"burst"`
	Instances *int     `json:"instances"`
	Demand    *float64 `json:"demand_per_s"`
	Override  bool     `json:"override"`

	score float64
	state lease.BucketState
}

// topFrame is one refresh, as JSON.
type topFrame struct {
	Time        int64    `json:"time_us"`
	Refresh     int      `json:"refresh"`
	ScanCalls   int      `json:"scan_calls"`
	Sampled     int      `json:"sampled_keys"`
	BucketReads int      `json:"bucket_reads"`
	Watched     int      `json:"watched"`
	Passes      int      `json:"passes"`
	Tenants     []topRow `json:"tenants"`
}

func topCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "top", "")
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: leasequota %s", topUsage)
		fs.PrintDefaults()
	}
	interval := fs.Duration("interval", 2*time.Second, "time between refreshes (>= 10ms)")
	n := fs.Int("n", 10, "tenants shown (1..1000)")
	sample := fs.Int("sample", 1000, "keys SCAN looks at per refresh, and the most new buckets read (1..100000)")
	watch := fs.Int("watch", 50, "buckets re-read every refresh: the highest ranked so far (>= -n, <= 10000; when not given, 50 or -n, the larger)")
	iterations := fs.Int("iterations", 0, "refreshes to show, then exit (0: until interrupted; an interrupt ends it early with the same exit status)")
	once := fs.Bool("once", false, "one refresh (as -iterations 1)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	watchSet := false
	fs.Visit(func(f *flag.Flag) { watchSet = watchSet || f.Name == "watch" })
	if !watchSet {
		// -n of more than 50 with the default -watch was refused for a
		// flag the operator never gave.
		*watch = max(*watch, *n)
	}
	switch {
	case *interval < 10*time.Millisecond:
		return usagef("top: -interval %v: want >= 10ms", *interval)
	case *n < 1 || *n > 1000:
		return usagef("top: -n %d: want 1..1000", *n)
	case *sample < 1 || *sample > 100000:
		return usagef("top: -sample %d: want 1..100000", *sample)
	case *watch < *n || *watch > 10000:
		return usagef("top: -watch %d: want from -n (%d) to 10000", *watch, *n)
	case *iterations < 0:
		return usagef("top: -iterations %d: want >= 0", *iterations)
	case *once && *iterations > 1:
		return usagef("top: -once with -iterations %d", *iterations)
	}
	if *once {
		*iterations = 1
	}
	t := &top{e: e, sampler: e.client.NewBucketSampler(), watched: map[string]lease.BucketState{},
		n: *n, sample: *sample, watch: *watch, clear: *iterations != 1 && isTerminal(e.stdout)}
	for i := 1; *iterations == 0 || i <= *iterations; i++ {
		if i > 1 {
			timer := time.NewTimer(*interval)
			select {
			case <-ctx.Done():
				timer.Stop()
				return t.failures() // interrupted: done
			case <-timer.C:
			}
		}
		frame, err := t.refresh(ctx, i)
		if err != nil {
			// An interrupt is the operator ending top, with -iterations
			// as without: it ends as one between refreshes does (above),
			// whichever moment it lands. Only -iterations 0 was taken so,
			// and an interrupt during a refresh of -iterations N exited 1
			// where one between refreshes exited 0.
			if ctx.Err() != nil {
				return t.failures()
			}
			return fmt.Errorf("top: %w", err)
		}
		if err := t.print(frame); err != nil {
			return err
		}
	}
	return t.failures()
}

// failures is the error top ends with when some buckets could not be
// read: each was reported on stderr as it failed, and the frames went
// on without it, but a script or an operator must not read exit status 0
// as "every bucket was read".
func (t *top) failures() error {
	if t.failed == 0 {
		return nil
	}
	return fmt.Errorf("top: %d bucket reads failed (each reported above)", t.failed)
}

// top keeps what a refresh needs of the previous ones.
type top struct {
	e       *env
	sampler *lease.BucketSampler
	watched map[string]lease.BucketState // key → its last read
	n       int
	sample  int
	watch   int
	clear   bool
	failed  int // bucket reads that failed, over every refresh
}

// refresh samples and reads buckets once and ranks them.
func (t *top) refresh(ctx context.Context, i int) (topFrame, error) {
	cctx, cancel := t.e.call(ctx)
	defer cancel()
	scans := t.sampler.Scans()
	fresh, err := t.sampler.Next(cctx, t.sample)
	if err != nil {
		return topFrame{}, err
	}
	keys := make([]string, 0, len(t.watched)+len(fresh))
	for k := range t.watched {
		keys = append(keys, k)
	}
	keys = append(keys, dedupe(fresh, t.watched)...)
	states, errs, err := t.e.client.ReadBuckets(cctx, keys)
	if err != nil {
		return topFrame{}, err
	}
	frame := topFrame{Refresh: i, ScanCalls: t.sampler.Scans() - scans, Sampled: len(fresh), BucketReads: len(keys), Passes: t.sampler.Passes()}
	rows := make([]topRow, 0, len(states))
	for j, st := range states {
		if errs[j] != nil {
			fmt.Fprintf(t.e.stderr, "leasequota: top: %s\n", stripPrefix(errs[j].Error()))
			t.failed++
			continue
		}
		frame.Time = max(frame.Time, st.Now)
		if !st.Exists && st.Override == nil {
			continue // gone since the SCAN, or expired full: not busy
		}
		prev, seen := t.watched[st.Key]
		rows = append(rows, makeRow(st, prev, seen))
	}
	slices.SortStableFunc(rows, func(a, b topRow) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	clear(t.watched)
	for j := 0; j < len(rows) && j < t.watch; j++ {
		t.watched[rows[j].Key] = rows[j].state
	}
	frame.Watched = len(t.watched)
	frame.Tenants = rows[:min(len(rows), t.n)]
	return frame, nil
}

// dedupe returns the keys of fresh that are not watched, each once.
func dedupe(fresh []string, watched map[string]lease.BucketState) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range fresh {
		if _, ok := watched[k]; ok || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	return out
}

// makeRow is a bucket's line: cur as read now, prev as read at the
// previous refresh (when seen).
func makeRow(cur, prev lease.BucketState, seen bool) topRow {
	r := topRow{Key: cur.Key, Override: cur.Override != nil, state: cur}
	if cur.Named {
		r.Tenant = &cur.Tenant
	}
	lv := cur.Level()
	if lv.Known {
		r.Level = &lv.Tokens
	}
	if lv.Burst > 0 {
		r.Burst = &lv.Burst
	}
	if s := cur.Registry; s != nil {
		r.Instances, r.Demand = &s.Instances, &s.Demand
		r.score = s.Demand
	}
	if seen {
		if g, ok := grantedRate(prev, cur); ok {
			r.Granted = &g
			r.score = g
		}
	}
	return r
}

// grantedRate estimates the tokens taken from a bucket per second between
// two reads of it: the level at prev refilled up to cur's last update
// (capped at the burst), less cur's level, over the time between the
// reads. false when the rate is not known.
func grantedRate(prev, cur lease.BucketState) (float64, bool) {
	dt := float64(cur.Now-prev.Now) / 1e6
	if dt <= 0 {
		return 0, false
	}
	if !cur.Exists || (prev.Exists && cur.Updated == prev.Updated) {
		return 0, true // no lease call since (or expired, being full)
	}
	lv, plv := cur.Level(), prev.Level()
	rate, burst := lv.Rate, lv.Burst
	if rate <= 0 {
		rate = plv.Rate
	}
	if burst <= 0 {
		burst = plv.Burst
	}
	if burst <= 0 || (prev.Exists && rate <= 0) {
		return 0, false
	}
	start := float64(burst) // a missing bucket is full
	if prev.Exists {
		start = min(start, prev.Tokens+rate*float64(cur.Updated-prev.Updated)/1e6)
	}
	return max(0, start-cur.Tokens) / dt, true
}

// print writes a refresh: a table, or a JSON line.
func (t *top) print(f topFrame) error {
	if t.e.json {
		return writeJSON(t.e, f)
	}
	if t.clear {
		fmt.Fprint(t.e.stdout, "\033[H\033[2J")
	}
	at := "-"
	if f.Time > 0 {
		at = time.UnixMicro(f.Time).UTC().Format(time.TimeOnly)
	}
	fmt.Fprintf(t.e.stdout, "leasequota top  %s  refresh %d: %d SCAN calls, %d keys sampled, %d buckets read, %d watched, %d full passes\n",
		at, f.Refresh, f.ScanCalls, f.Sampled, f.BucketReads, f.Watched, f.Passes)
	w := tabwriter.NewWriter(t.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tGRANTED/S\tLEVEL\tBURST\tFILL\tINSTANCES\tDEMAND/S\tQUOTA\t")
	for _, r := range f.Tenants {
		name := "(hashed) " + printableKey(r.Key)
		if r.Tenant != nil {
			name = printable(*r.Tenant)
		}
		fill := "-"
		if r.Level != nil && r.Burst != nil {
			fill = fmt.Sprintf("%.0f%%", 100**r.Level/float64(*r.Burst))
		}
		quota := "services"
		if r.Override {
			quota = "override"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, optFloat(r.Granted), optFloat(r.Level), optInt(r.Burst),
			fill, optInt(r.Instances), optFloat(r.Demand), quota)
	}
	return w.Flush()
}

func optFloat(f *float64) string {
	if f == nil {
		return "-"
	}
	return formatFloat(*f)
}

func optInt[T int | int64](i *T) string {
	if i == nil {
		return "-"
	}
	return fmt.Sprint(*i)
}

// isTerminal reports whether w is a terminal (a refreshing view clears
// the screen there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
