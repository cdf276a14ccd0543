package memstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/lease"
)

// ErrClock is returned (wrapped) by calls that read a clock outside the
// range of Redis TIME that the scripts' arithmetic holds exactly: before
// 1970, or 2^53 microseconds (in 2255) and later.
var ErrClock = errors.New("memstore: clock out of range")

// ErrNoStore is returned (wrapped) by the methods of an Instance that
// Store.Instance did not make (a zero Instance), which has no store.
var ErrNoStore = errors.New("memstore: no store")

// maxClock is the first microsecond the store refuses: from 2^53 on, a
// float64 (a Lua number in the scripts) no longer holds every microsecond.
const maxClock = 1 << 53

// never is the expiry of a key that is kept for ever (PERSIST).
const never = math.MaxInt64

// An Option configures a Store made by New.
type Option func(*Store)

// WithClock makes the store read now instead of time.Now: the analogue of
// Redis TIME, read once per call, in whole microseconds. A fake clock makes
// a simulation deterministic; a clock that stands still or goes back is
// handled as the scripts handle Redis's (each call on a bucket takes a
// microsecond after the previous one). now is called with the store's
// mutex held and must not call the store. A nil now means time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// Store is an in-process keyspace of global buckets (see the package doc).
// The zero value is empty and uses the real clock. A Store must not be
// copied after first use.
type Store struct {
	now func() time.Time // set by New, never changed; nil means time.Now

	mu      sync.Mutex
	tenants map[string]*tenant // guarded by mu; nil until the first write
	version int64              // guarded by mu: the quota version
	writes  int                // guarded by mu: writes since the last sweep
	// roster is the fleet's roster (lease.RosterKey): each counted
	// instance's id and when its entry expires, in ms. Guarded by mu; nil
	// until the first count.
	roster map[string]int64
}

// New returns an empty Store configured by opts.
func New(opts ...Option) *Store {
	s := &Store{}
	for _, o := range opts {
		o(s)
	}
	return s
}

// tenant is what the store keeps for one tenant: the four Redis keys of
// lease's layout. Guarded by Store.mu, like everything it points to.
type tenant struct {
	b        bucket
	reg      registry
	rel      releases
	override *lease.Override // never expires; never aliased outside the store
}

// bucket is the bucket hash {tk, ts, h, rg}.
type bucket struct {
	live   bool    // the key exists; a missing bucket is a full one
	tk     float64 // tokens as of ts
	ts     int64   // the bucket's time of its last write, µs
	hb     int64   // the burst h was recorded under
	h      peaks.History
	expire int64        // the clock's ms after which the key is gone, or never
	rg     *summary     // the registry summary (field rg); nil when missing
	sh     lease.Shares // the rate shares in force as of ts (field sh); zero when none
}

// summary is the registry summary acquire.lua keeps in the bucket: the
// instances, their total demand and the water level of their max-min
// fair shares (-1 when every demand is met), as of at (µs).
type summary struct {
	at     int64
	n      int
	demand float64
	level  float64
}

// The script's cadences, as fractions of the registry window: the
// summary is recomputed at least every summaryAge, an entry rewritten at
// least every entryAge.
const (
	summaryAge = 1.0 / 8
	entryAge   = 1.0 / 4
)

// registry is the instance registry hash: id → last acquire, demand,
// credit.
type registry struct {
	entries map[string]registration // nil or empty: the key is missing
	expire  int64                   // ms, as bucket.expire
}

type registration struct {
	seen   int64 // the bucket's time of the instance's last acquire, µs
	demand float64
	credit float64
	share  lease.RateShare // the rate share it was granted last (the entry's fourth field)
}

// kept reports whether the entry is still its instance's at the bucket's
// time at: written at cutoff or after (a window before at: the instance
// is active), or holding a share that ends after at, which its instance
// renews without calls in between (acquire.lua's holds_share; such an
// entry is not counted among the active instances).
func (e registration) kept(cutoff, at int64) bool {
	return e.seen >= cutoff || e.share.Held() && e.share.Until.UnixMicro() > at
}

// releases is the sorted set of applied release ids, by the bucket's time
// they were applied at.
type releases struct {
	ids    map[string]int64 // id → score (µs); nil or empty: missing
	order  []scored         // the same, ascending by score, for pruning
	expire int64            // ms, as bucket.expire
}

type scored struct {
	id    string
	score int64
}

// expire drops the keys of t that expired by nowMS: Redis considers a key
// gone once its clock in milliseconds is past the expiry.
func (t *tenant) expire(nowMS int64) {
	if t.b.live && nowMS > t.b.expire {
		t.b = bucket{}
	}
	if len(t.reg.entries) > 0 && nowMS > t.reg.expire {
		t.reg = registry{}
	}
	if len(t.rel.ids) > 0 && nowMS > t.rel.expire {
		t.rel = releases{}
	}
}

// empty reports whether t holds no key.
func (t *tenant) empty() bool {
	return !t.b.live && len(t.reg.entries) == 0 && len(t.rel.ids) == 0 && t.override == nil
}

// clock reads the store's clock: microseconds and milliseconds since 1970.
func (s *Store) clock() (us, ms int64, err error) {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	t := now()
	us = t.UnixMicro()
	if us < 0 || us >= maxClock {
		return 0, 0, fmt.Errorf("%w: %v: want a time from 1970 to 2255", ErrClock, t)
	}
	return us, us / 1000, nil
}

// lookup returns tenant name with its expired keys dropped, or nil when it
// holds nothing. s.mu must be held.
func (s *Store) lookup(name string, nowMS int64) *tenant {
	t := s.tenants[name]
	if t == nil {
		return nil
	}
	t.expire(nowMS)
	return t
}

// writable returns tenant name for a write, creating it if need be, and
// counts the write toward the next sweep. s.mu must be held.
func (s *Store) writable(name string, nowMS int64) *tenant {
	s.writes++
	if s.writes > len(s.tenants)+64 {
		s.sweep(nowMS)
	}
	if t := s.lookup(name, nowMS); t != nil {
		return t
	}
	if s.tenants == nil {
		s.tenants = map[string]*tenant{}
	}
	t := &tenant{}
	s.tenants[name] = t
	return t
}

// sweep drops every expired key, and tenants left with none: what Redis's
// background expiry does, paid for by the writes since the last sweep
// (there are more of them than tenants). s.mu must be held.
func (s *Store) sweep(nowMS int64) {
	s.writes = 0
	for name, t := range s.tenants {
		t.expire(nowMS)
		if t.empty() {
			delete(s.tenants, name)
		}
	}
}

// limits returns the rate and burst in force for t: its override's, else
// the caller's lim (acquire.lua and release.lua through read_override).
func (t *tenant) limits(lim lease.Limits) (float64, int64) {
	if t != nil && t.override != nil {
		return t.override.Rate, t.override.Burst
	}
	return lim.Rate, lim.Burst
}

// refill is common.lua's read_bucket: the tokens of b at rate less the
// shares in force, capped at burst, as of a call at now; whether the
// bucket is missing; the bucket's time of the call (now, or a microsecond
// after its last call if the clock has not moved past it); and the shares
// in force then, which store keeps.
func (b *bucket) refill(now int64, rate float64, burst int64) (tokens float64, missing bool, at int64, sh lease.Shares) {
	if !b.live {
		return float64(burst), true, now, lease.Shares{}
	}
	if now <= b.ts {
		now = b.ts + 1
	}
	tokens, sh = lease.RefillShares(b.tk, b.ts, now, rate, burst, b.sh)
	return tokens, false, now, sh
}

// history is common.lua's history: b's level history if it was recorded
// under burst, else an unknown past, one entry (at, the higher of burst
// and the burst it was recorded under).
func (b *bucket) history(at int64, burst int64) peaks.History {
	if b.live && b.hb == burst {
		return b.h
	}
	top := burst
	if b.live && b.hb > top {
		top = b.hb
	}
	var h peaks.History
	h.Reset(at, float64(top))
	return h
}

// store is common.lua's store: the bucket holds tokens as of at, with
// history h recorded under burst and the shares sh in force, and is kept
// until it would have refilled to full at rate once no share is in force
// (lease.Settled: at, when none is), plus a second (for ever beyond
// ~31,700 years): settled + (burst - level then)/rate + 1 s, at being at
// or after now, the clock of the call (µs; nowMS in ms), from which the
// TTL is counted.
func (b *bucket) store(now, nowMS int64, tokens float64, at int64, rate float64, burst int64, h peaks.History, sh lease.Shares) {
	if !b.live {
		b.rg = nil
	}
	// common.lua's store packs the history into field h, merging entries
	// until it fits. (It keeps none for a burst, or an oldest level, of
	// peaks.Limit or more, which a valid quota never reaches: Burst is at
	// most lease.MaxBurst, and no level is above the burst; TestExpiry.)
	h.Pack(at, burst)
	b.live, b.tk, b.ts, b.hb, b.h, b.sh = true, tokens, at, burst, h, sh
	until, level := lease.Settled(tokens, at, rate, burst, sh)
	ttl := math.Ceil(float64(until-now)/1000+(float64(burst)-level)/rate*1000) + 1000
	if ttl < 1e15 {
		b.expire = nowMS + int64(ttl)
	} else {
		b.expire = never
	}
}

// acquire is acquire.lua for one valid request of view in.
func (s *Store) acquire(in *Instance, r lease.Request) (lease.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, nowMS, err := s.clock()
	if err != nil {
		return lease.Grant{}, err
	}
	t := s.writable(r.Tenant, nowMS)
	rate, burst := t.limits(r.Limits)
	tokens, _, at, sh := t.b.refill(now, rate, burst)
	// Record the level before the debit.
	h := t.b.history(at, burst)
	h.Push(at, tokens)

	g := lease.Grant{ServerTime: time.UnixMicro(at), Override: copyOverride(t.override)}
	var credit, capacity, totalDemand float64
	var prev *registration
	var fresh *summary // the summary recomputed or joined by this call
	demand := 0.0
	window := float64(in.windowMS) * 1000
	if in.id != "" {
		demand = saneDemand(r.Demand)
		cutoff := at - in.windowMS*1000
		e, known := t.reg.entries[in.id]
		if known && e.kept(cutoff, at) {
			prev = &e
		}
		rg := t.b.rg
		if !t.b.live {
			rg = nil
		}
		usable := rg != nil && rg.at <= at && float64(at-rg.at) < window*summaryAge
		switch {
		case usable && !known && r.Share != lease.ShareAsk && rg.level == -1 && rg.demand+demand <= rate:
			// A new instance that asks for no share joins a summary whose
			// demands are all met and stay met with its own (acquire.lua):
			// what a recompute gives, but for entries gone stale since it
			// was made.
			fresh = &summary{at: rg.at, n: rg.n + 1, demand: rg.demand + demand, level: -1}
			rg = fresh
		case !usable || prev == nil || prev.seen < cutoff:
			// An own entry older than the window (kept for its share) is
			// not in the summaries: recompute, so that the caller counts.
			demands := []float64{demand}
			for id, e := range t.reg.entries {
				switch {
				case id == in.id:
				case e.seen < cutoff:
					if !e.kept(cutoff, at) {
						delete(t.reg.entries, id)
					}
				default:
					demands = append(demands, saneDemand(e.demand))
				}
			}
			if len(t.reg.entries) == 0 {
				// Emptied, the hash is gone in Redis, and its TTL with it:
				// the caller's entry makes a new one (kept below).
				t.reg.expire = 0
			}
			// Max-min fair share of the rate among the demands
			// (water-filling), in the script's order of operations.
			slices.Sort(demands)
			left, level := rate, -1.0
			for k, d := range demands {
				totalDemand += d
				if level < 0 {
					if fair := left / float64(len(demands)-k); d > fair {
						level = fair
					} else {
						left -= d
					}
				}
			}
			fresh = &summary{at: at, n: len(demands), demand: totalDemand, level: level}
			rg = fresh
		}
		g.Instances, totalDemand = rg.n, rg.demand
		g.Share = demand
		if rg.level >= 0 && g.Share > rg.level {
			g.Share = rg.level
		}
		// The rate share the instance holds while it is in force; asked
		// for, it ends and a new one is granted; ended when named. (No
		// client of an earlier release shares a Store, so none is ever
		// refused for one: acquire.lua's ol.)
		if prev != nil && sh.Holds(prev.share, time.UnixMicro(at)) {
			g.RateShare = prev.share
		}
		if g.RateShare.Held() && (r.Share == lease.ShareAsk || r.Share == lease.ShareEnd && g.RateShare.From.UnixMicro() == r.ShareFrom.UnixMicro()) {
			sh, g.RateShare = sh.Drop(g.RateShare), lease.RateShare{}
		}
		if r.Share == lease.ShareAsk {
			sh, g.RateShare = lease.GrantShare(sh, at, r.ShareTerms, rate, g.Share)
		}
		// The credit follows the fair share less the rate share held.
		cshare := g.Share
		if g.RateShare.Held() {
			cshare = max(g.Share-g.RateShare.Rate, 0)
		}
		capacity = lease.CreditCap(burst, rate, cshare, time.Duration(in.windowMS)*time.Millisecond)
		if prev == nil {
			credit = capacity
		} else {
			since := max(at-prev.seen, 0)
			credit = prev.credit + cshare*float64(since)/1e6
			if credit > capacity {
				credit = capacity
			}
		}
	}

	granted := math.Floor(tokens)
	if float64(r.Want) < granted {
		granted = float64(r.Want)
	}
	held := false // held to its fair share by the credit rule
	if in.id != "" {
		// While the demands exceed the rate and the bucket is less than
		// half full, a grant is capped at the instance's credit.
		if totalDemand > rate && tokens < float64(burst)/2 {
			if c := math.Floor(credit); granted > c {
				granted = c
			}
			credit -= granted
			held = demand > g.Share
		} else {
			credit = capacity
		}
		// The entry is rewritten when it changes what a later call
		// computes, and at least every entryAge of the window.
		if prev == nil || credit != prev.credit || float64(at-prev.seen) >= window*entryAge ||
			math.Abs(demand-prev.demand) > prev.demand/4 || !g.RateShare.Equal(prev.share) {
			if t.reg.entries == nil {
				t.reg.entries = map[string]registration{}
			}
			t.reg.entries[in.id] = registration{seen: at, demand: demand, credit: credit, share: g.RateShare}
		}
		// The hash is kept two windows from each recomputed summary and
		// each share granted, or until the shares in force end when that
		// is later, and never less than it was kept for: a shorter
		// window does not cut a longer one's (acquire.lua).
		if (fresh != nil || r.Share == lease.ShareAsk && g.RateShare.Held()) && len(t.reg.entries) > 0 {
			ms := 2 * in.windowMS
			if sh.InForce() {
				ms = max(ms, int64(math.Ceil(float64(sh.Until()-at)/1000)))
			}
			t.reg.expire = max(t.reg.expire, nowMS+ms)
		}
	}
	tokens -= granted
	// A reservation (acquire.lua): the share over Reserve, within the
	// refill up to lease.ReserveAhead after the clock, paced at the share,
	// when the bucket cannot serve more now or the instance is held to its
	// share. The whole tokens left (keep) stay for the others.
	stored := at
	if lms := ceilMillis(r.Reserve); lms > 0 && in.id != "" && g.Share > 0 && !sh.InForce() && ((float64(r.Want) > granted && tokens < 1) || held) {
		keep := math.Floor(tokens)
		tokens -= keep
		ahead := lease.ReserveAhead.Microseconds()
		room := float64(now+ahead-at)*rate/1e6 + tokens
		pace := min(g.Share, rate)
		reserved := math.Floor(pace * float64(lms) / 1000)
		if room < reserved {
			reserved = math.Floor(room)
		}
		for reserved > 0 {
			stored = int64(math.Ceil(float64(at) + (reserved-tokens)*1e6/rate))
			if stored <= now+ahead {
				break
			}
			reserved--
		}
		if reserved > 0 {
			g.Reserved = int64(reserved)
			g.Pace = pace
			granted += reserved
			tokens = keep
		} else {
			stored = at
			tokens += keep
		}
	}
	t.b.store(now, nowMS, tokens, stored, rate, burst, h, sh)
	if fresh != nil {
		t.b.rg = fresh
	}
	g.Granted = int64(granted)
	g.Tokens = tokens
	g.Wait = time.Duration(at-now) * time.Microsecond
	return g, nil
}

// release is release.lua for one valid request with Amount > 0 of a view;
// rid is its release id, "" for none.
func (s *Store) release(r lease.ReleaseRequest, rid string) (lease.Return, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, nowMS, err := s.clock()
	if err != nil {
		return lease.Return{}, err
	}
	t := s.lookup(r.Tenant, nowMS)
	rate, burst := t.limits(r.Limits)
	if t == nil || !t.b.live {
		// A missing bucket is full: nothing to credit, nothing written.
		return lease.Return{Tokens: float64(burst), ServerTime: time.UnixMicro(now)}, nil
	}
	t = s.writable(r.Tenant, nowMS)
	x, _, at, sh := t.b.refill(now, rate, burst)
	if rid != "" {
		if t.rel.applied(rid) {
			// Applied before: report the bucket, change nothing.
			return lease.Return{Tokens: x, ServerTime: time.UnixMicro(at)}, nil
		}
		keep := lease.ReleaseDedupWindow.Milliseconds()
		t.rel.add(rid, at, at-keep*1000)
		t.rel.expire = nowMS + keep
	}
	h := t.b.history(at, burst)
	g := peaks.GrantTime(at, now, ceilMillis(r.Age)*1000, uint32(r.Grant))
	credit := float64(burst) - h.Peak(g, x)
	if credit > float64(r.Amount) {
		credit = float64(r.Amount)
	}
	if credit < 0 {
		credit = 0
	}
	h.Raise(g, credit)
	tokens := x + credit
	if tokens > float64(burst) {
		tokens = float64(burst)
	}
	t.b.store(now, nowMS, tokens, at, rate, burst, h, sh)
	return lease.Return{Credited: credit, Tokens: tokens, ServerTime: time.UnixMicro(at)}, nil
}

// applied reports whether id is in the set.
func (rs *releases) applied(id string) bool {
	_, ok := rs.ids[id]
	return ok
}

// add puts id (not in the set) in at score, then drops the ids scored at
// or below cutoff: ZADD, then ZREMRANGEBYSCORE -inf cutoff.
func (rs *releases) add(id string, score, cutoff int64) {
	if rs.ids == nil {
		rs.ids = map[string]int64{}
	}
	rs.ids[id] = score
	// Scores are the bucket's times, which rise, so this is an append but
	// after the clock went back across an expired bucket.
	i := sort.Search(len(rs.order), func(i int) bool { return rs.order[i].score > score })
	rs.order = append(rs.order, scored{})
	copy(rs.order[i+1:], rs.order[i:])
	rs.order[i] = scored{id: id, score: score}
	n := 0
	for n < len(rs.order) && rs.order[n].score <= cutoff {
		delete(rs.ids, rs.order[n].id)
		n++
	}
	rs.order = append(rs.order[:0], rs.order[n:]...)
}

// setQuota is quota.lua's set (o non-nil) and del (o nil), and the INCR of
// the quota version that follows them.
func (s *Store) setQuota(name string, base lease.Limits, o *lease.Override) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, nowMS, err := s.clock()
	if err != nil {
		return 0, err
	}
	t := s.writable(name, nowMS)
	oldRate, oldBurst := t.limits(base)
	newRate, newBurst := base.Rate, base.Burst
	if o != nil {
		newRate, newBurst = o.Rate, o.Burst
	}
	// Refill at the quota in force until now, cap at the new burst, and
	// start the history anew: no free refill, no loss below the new cap,
	// and no credit for grants before the change.
	tokens, _, at, sh := t.b.refill(now, oldRate, oldBurst)
	if tokens > float64(newBurst) {
		tokens = float64(newBurst)
	}
	var h peaks.History
	h.Reset(at, float64(max(oldBurst, newBurst)))
	t.b.store(now, nowMS, tokens, at, newRate, newBurst, h, sh)
	// The registry summary's water level is the old rate's: dropped.
	t.b.rg = nil
	t.override = copyOverride(o)
	s.version++
	return tokens, nil
}

func copyOverride(o *lease.Override) *lease.Override {
	if o == nil {
		return nil
	}
	c := *o
	return &c
}

// saneDemand is a reported demand as the script reads it: what is not a
// number >= 0 (NaN, negative, infinite) counts as 0.
func saneDemand(d float64) float64 {
	if !(d >= 0) || math.IsInf(d, 0) {
		return 0
	}
	return d
}

// ceilMillis is d (>= 0) in milliseconds, rounded up: the age lease.Client
// sends.
func ceilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// Instance returns the view of s of instance id, which implements
// lease.Store as a lease.Client made WithInstance(id, window) does: each
// acquire registers the instance in the tenant's registry and reports the
// active instances and the instance's fair share, and each release carries
// a unique id (id, a colon and a sequence number of the view) that the
// store applies at most once within lease.ReleaseDedupWindow. Two views
// with the same id share the registry entry and, like two lease.Clients
// with the same id, release ids: give each instance its own id.
//
// With an empty id the view registers nothing, reports 0 instances and no
// share, and its releases carry no id, like a lease.Client made without
// WithInstance; window is then ignored. Otherwise window, of which whole
// milliseconds count, must be at least a millisecond: a shorter one fails
// with an error wrapping lease.ErrBadRequest.
func (s *Store) Instance(id string, window time.Duration) (lease.Store, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: Instance called on a nil *Store", ErrNoStore)
	}
	if id != "" && window < time.Millisecond {
		return nil, fmt.Errorf("%w: Instance window %v: want >= 1ms", lease.ErrBadRequest, window)
	}
	in := &Instance{s: s, id: id}
	if id != "" {
		in.windowMS = window.Milliseconds()
	}
	return in, nil
}

// Instance is one instance's view of a Store; it implements lease.Store.
// Made by Store.Instance; safe for concurrent use. A zero Instance has no
// store: its calls fail with ErrNoStore.
type Instance struct {
	s        *Store
	id       string // "" for none
	windowMS int64  // the registry window, whole milliseconds
	releases atomic.Uint64
}

var _ lease.Store = (*Instance)(nil)

// store returns in's Store, or an error for an Instance without one.
func (in *Instance) store(op string) (*Store, error) {
	if in == nil || in.s == nil {
		return nil, fmt.Errorf("%w: %s on a zero Instance", ErrNoStore, op)
	}
	return in.s, nil
}

// AcquireMany acquires for each request in turn, as lease.Client's
// AcquireMany does in one pipeline: results[i] is the outcome of reqs[i];
// results is reused when its capacity is at least len(reqs). An invalid
// request gets an error wrapping lease.ErrBadRequest in its Result and
// touches nothing. The returned error is non-nil only when every valid
// request failed: ctx was done (nothing was changed) or the clock is out
// of range; it is then in each of their Results too.
func (in *Instance) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if cap(results) >= len(reqs) {
		results = results[:len(reqs)]
	} else {
		results = make([]lease.Result, len(reqs))
	}
	valid := 0
	for i := range reqs {
		results[i] = lease.Result{Err: reqs[i].Validate()}
		if results[i].Err == nil {
			valid++
		}
	}
	if valid == 0 {
		return results, nil
	}
	s, err := in.store("acquire")
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("memstore: acquire: %w", ctx.Err())
	}
	if err != nil {
		for i := range results {
			if results[i].Err == nil {
				results[i].Err = err
			}
		}
		return results, err
	}
	var first error
	failed := 0
	for i := range reqs {
		if results[i].Err != nil {
			continue
		}
		results[i].Grant, results[i].Err = s.acquire(in, reqs[i])
		if results[i].Err != nil {
			failed++
			if first == nil {
				first = results[i].Err
			}
		}
	}
	if failed < valid {
		first = nil
	}
	return results, first
}

// ReleaseMany releases for each request in turn, as lease.Client's
// ReleaseMany does: one result per request; a request with Amount 0 gets
// a zero Return and touches nothing; an invalid one gets an error wrapping
// lease.ErrBadRequest and touches nothing. When ctx is done every release
// to be made fails with an error wrapping ctx.Err() and nothing changes.
func (in *Instance) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	res := make([]lease.ReleaseResult, len(reqs))
	rids := make([]string, len(reqs))
	send := false
	for i := range reqs {
		if res[i].Err = reqs[i].Validate(); res[i].Err != nil || reqs[i].Amount == 0 {
			continue
		}
		send = true
		// Numbered before the context is checked, as lease.Client numbers
		// a release when it builds the command.
		if in != nil && in.id != "" {
			rids[i] = in.id + ":" + strconv.FormatUint(in.releases.Add(1), 10)
		}
	}
	if !send {
		return res
	}
	s, err := in.store("release")
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("memstore: release: %w", ctx.Err())
	}
	if err != nil {
		for i := range reqs {
			if res[i].Err == nil && reqs[i].Amount != 0 {
				res[i].Err = err
			}
		}
		return res
	}
	for i := range reqs {
		if res[i].Err != nil || reqs[i].Amount == 0 {
			continue
		}
		res[i].Return, res[i].Err = s.release(reqs[i], rids[i])
	}
	return res
}

// GetOverride returns the quota override stored for tenant (a copy), or
// nil when there is none.
func (in *Instance) GetOverride(ctx context.Context, tenant string) (*lease.Override, error) {
	s, err := in.store("get quota")
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: get quota: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tenants[tenant]; t != nil {
		return copyOverride(t.override), nil
	}
	return nil, nil
}

// SetOverride stores o as tenant's quota, as lease.Client.SetOverride
// does: in one step it refills the bucket at the quota in force (the
// stored override, else base), caps it at o.Burst, restarts its refill
// clock and its level history, stores o and raises the quota version. It
// returns the bucket's tokens after the change. Invalid base or o fail
// with an error wrapping lease.ErrBadRequest and change nothing.
func (in *Instance) SetOverride(ctx context.Context, tenant string, base lease.Limits, o lease.Override) (float64, error) {
	if err := base.Validate(); err != nil {
		return 0, err
	}
	if err := o.Validate(); err != nil {
		return 0, err
	}
	s, err := in.store("set quota")
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: set quota: %w", err)
	}
	return s.setQuota(tenant, base, &o)
}

// DeleteOverride removes tenant's quota override, with the same care for
// the bucket as SetOverride, base being the quota in force afterwards; it
// raises the quota version even when no override was stored.
func (in *Instance) DeleteOverride(ctx context.Context, tenant string, base lease.Limits) (float64, error) {
	if err := base.Validate(); err != nil {
		return 0, err
	}
	s, err := in.store("delete quota")
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: delete quota: %w", err)
	}
	return s.setQuota(tenant, base, nil)
}

// ListOverrides returns an iterator over the stored quota overrides, as
// lease.Client.ListOverrides does, sorted by tenant: each with its tenant
// and with Key the override's key under the prefix "" (the store has no
// key space). The overrides are those stored when the iteration starts.
// When ctx is done (it is checked before each yield) the iterator yields
// an error wrapping ctx.Err() and ends.
func (in *Instance) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	return func(yield func(lease.ListedOverride, error) bool) {
		s, err := in.store("list overrides")
		if err != nil {
			yield(lease.ListedOverride{}, err)
			return
		}
		if err := ctx.Err(); err != nil {
			yield(lease.ListedOverride{}, fmt.Errorf("memstore: list overrides: %w", err))
			return
		}
		s.mu.Lock()
		var list []lease.ListedOverride
		for name, t := range s.tenants {
			if t.override != nil {
				list = append(list, lease.ListedOverride{Tenant: name, Key: lease.QuotaKey(lease.Key("", name)), Override: *t.override})
			}
		}
		s.mu.Unlock()
		slices.SortFunc(list, func(a, b lease.ListedOverride) int { return strings.Compare(a.Tenant, b.Tenant) })
		for _, lo := range list {
			if err := ctx.Err(); err != nil {
				yield(lease.ListedOverride{}, fmt.Errorf("memstore: list overrides: %w", err))
				return
			}
			if !yield(lo, nil) {
				return
			}
		}
	}
}

// QuotaVersion returns the number of SetOverride and DeleteOverride calls
// the store has applied: 0 before any.
func (in *Instance) QuotaVersion(ctx context.Context) (int64, error) {
	s, err := in.store("quota version")
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: quota version: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, nil
}

var (
	_ lease.InstanceCounter = (*Instance)(nil)
	_ lease.RosterLeaver    = (*Instance)(nil)
)

// CountInstances records in's instance in the store's roster for its
// window and returns how many instances are recorded there, each for its
// own window since its last count, in's included (lease.Client's
// CountInstances). It fails with an error wrapping lease.ErrBadRequest
// for an Instance without an id.
func (in *Instance) CountInstances(ctx context.Context) (int, error) {
	s, err := in.store("count instances")
	if err != nil {
		return 0, err
	}
	if in.id == "" {
		return 0, fmt.Errorf("%w: CountInstances needs an instance id", lease.ErrBadRequest)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: count instances: %w", err)
	}
	// The clock is read under the mutex, as WithClock promises.
	s.mu.Lock()
	defer s.mu.Unlock()
	_, nowMS, err := s.clock()
	if err != nil {
		return 0, err
	}
	if s.roster == nil {
		s.roster = make(map[string]int64)
	}
	s.roster[in.id] = nowMS + in.windowMS
	for id, until := range s.roster {
		if until < nowMS {
			delete(s.roster, id)
		}
	}
	return len(s.roster), nil
}

// LeaveRoster removes in's instance from the store's roster (lease.Client's
// LeaveRoster). It fails with an error wrapping lease.ErrBadRequest for an
// Instance without an id.
func (in *Instance) LeaveRoster(ctx context.Context) error {
	s, err := in.store("leave the roster")
	if err != nil {
		return err
	}
	if in.id == "" {
		return fmt.Errorf("%w: LeaveRoster needs an instance id", lease.ErrBadRequest)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: leave the roster: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.roster, in.id)
	return nil
}
