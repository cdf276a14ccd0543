package lease

// Reading a tenant's keys for an operator: the bucket, its override, its
// instance registry, as they are (inspect.lua, which writes nothing), and
// sampling the buckets under a prefix a bounded number at a time.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/peaks"
)

// BucketState is a tenant's bucket as read at one instant of Redis's clock
// (Client.Inspect, Client.ReadBuckets), with its override. Times are Redis
// TIME in microseconds.
type BucketState struct {
	// Key is the bucket's key.
	Key string
	// Tenant is the tenant, when Named: decoded from the key, or for a
	// hashed key (a tenant longer than 128 bytes) the name stored with its
	// override.
	Tenant string
	Named  bool
	// Now is Redis TIME when the keys were read.
	Now int64
	// Exists is false for a missing bucket: never used, or expired because
	// it had refilled to full.
	Exists bool
	// Tokens and Updated are the stored level (tk) and when it was
	// computed (ts; after Now for a frozen bucket, see Reservations in
	// the package doc).
	Tokens  float64
	Updated int64
	// Burst is the burst the level history was recorded under (in h,
	// or hb), 0 when not stored.
	Burst int64
	// TTL is the key's remaining time to live, -1 when it has no expiry
	// (0 when missing). Every write sets it to one second after the
	// bucket would be full at the rate and burst of that write (kept
	// for good past about 31,700 years). A TTL longer than a Duration
	// holds (about 292 years: a drained bucket of 10 tokens at 1e-9 a
	// second) is math.MaxInt64.
	TTL time.Duration
	// History is the level history release.lua credits returns against
	// (field h, or p1..p8 when a client of the previous release wrote the
	// bucket last; oldest first): each entry bounds the bucket's level
	// from the previous entry's time up to its own. Empty when none is
	// stored.
	History []HistoryEntry
	// Registry is the instance registry's summary (rg) as acquire.lua
	// last computed it, nil when none is stored (no instance acquired
	// with an id within the registry window) or the one stored is not
	// one acquire.lua would use (not finite, say: it recomputes it at the
	// next acquire).
	Registry *RegistrySummary
	// Override is the tenant's quota override, nil when none is stored.
	Override *Override
	// Shares are the rate shares in force as of Updated (field sh), the
	// zero Shares when none is recorded. This release grants none; it
	// honours a record that a later release writes (see Shares).
	Shares Shares
}

// HistoryEntry is one entry of a bucket's level history: the level was at
// most Level since the previous entry's time, up to At.
type HistoryEntry struct {
	At    int64 // Redis time, microseconds
	Level float64
}

// RegistrySummary is acquire.lua's summary of a tenant's instance
// registry, recomputed from every entry at least every eighth of the
// registry window.
type RegistrySummary struct {
	At         int64   // when it was computed (Redis time, microseconds)
	Instances  int     // instances that acquired within the window
	Demand     float64 // the sum of their reported demands, tokens/s
	WaterLevel float64 // the fair-share level, tokens/s; -1 when every demand is met
}

// InstanceEntry is one instance's entry in a tenant's registry.
type InstanceEntry struct {
	ID          string
	LastAcquire int64   // Redis time of its last entry write, microseconds
	Demand      float64 // tokens/s, as it reported
	Credit      float64 // its fair-share credit, tokens
	// Shares reports an entry written by a client that honours rate
	// shares (this release and later); false for an earlier release's.
	Shares bool
	// RateShare is the rate share it was granted last (in force while
	// the bucket's Shares hold it: BucketState.Shares.Holds).
	RateShare RateShare
}

// Inspection is everything Redis holds for one tenant (Client.Inspect).
type Inspection struct {
	BucketState
	// Instances are the registry's entries, by ID. Entries older than the
	// registry window are stale: acquire.lua drops them when it next
	// recomputes the summary.
	Instances []InstanceEntry
	// Releases is the number of release ids remembered for deduplication
	// (applied within ReleaseDedupWindow).
	Releases int64
}

// Level is a bucket's level now, as a BucketState tells it.
type Level struct {
	// Tokens is the level at the read's Redis time, when Known.
	Tokens float64
	Known  bool
	// Full reports a bucket known to be full (missing, or at its burst).
	Full bool
	// Rate and Burst are the quota the bucket refills at: the override's
	// when one is stored (Exact), else Rate as estimated from the key's
	// TTL (0 when that cannot be done) and Burst the one last written.
	Rate  float64
	Burst int64
	Exact bool
}

// maxTTL is the TTL Inspect gives a key that expires later than a
// Duration holds.
const maxTTL = time.Duration(math.MaxInt64)

// minTTLSpan is the shortest time to full from which Level estimates a
// rate: the TTL has millisecond resolution and is rounded up, so over
// 100 ms the estimate is within 1%.
const minTTLSpan = 100 * time.Millisecond

// Level returns the bucket's level at b.Now. With an override stored it
// refills the stored level at the override's rate less the shares in
// force (RefillShares), capped at its burst, as the scripts do. Without one, the services' rate is not stored, and
// it is estimated from the key's TTL, which the last write set to one
// second after the bucket would be full at the rate of that write:
// full at F = Now + TTL - 1 s, so rate = (Burst - Tokens)/(F - Updated),
// and the level refills linearly from Tokens at Updated to Burst at F.
// That is exact up to the TTL's rounding (below 1% when the bucket is
// more than 100 ms from full), and unknown for a key without a TTL or
// with one past what a Duration holds (TTL math.MaxInt64), a bucket at
// its burst (its rate does not show), a bucket with shares in
// force (its TTL counts from when they end) or a missing bucket without
// an override (full, at a burst not stored).
func (b BucketState) Level() Level {
	if o := b.Override; o != nil {
		lv := Level{Rate: o.Rate, Burst: o.Burst, Exact: true, Known: true}
		lv.Tokens = float64(o.Burst) // a missing bucket is full
		if b.Exists {
			lv.Tokens, _ = RefillShares(b.Tokens, b.Updated, max(b.Now, b.Updated), o.Rate, o.Burst, b.Shares)
		}
		lv.Full = lv.Tokens >= float64(o.Burst)
		return lv
	}
	if !b.Exists {
		return Level{Full: true}
	}
	lv := Level{Burst: b.Burst}
	if b.Burst > 0 && b.Tokens >= float64(b.Burst) {
		lv.Tokens, lv.Known, lv.Full = float64(b.Burst), true, true
		return lv
	}
	if b.TTL <= 0 || b.TTL == maxTTL || b.Burst <= 0 || b.Shares.InForce() {
		// With shares in force the TTL counts from when they end, and the
		// refill until then is not at the rate: no estimate.
		return lv
	}
	full := b.Now + (b.TTL - time.Second).Microseconds()
	span := full - b.Updated
	if span < minTTLSpan.Microseconds() {
		return lv
	}
	lv.Rate = (float64(b.Burst) - b.Tokens) * 1e6 / float64(span)
	lv.Known = true
	switch {
	case b.Now <= b.Updated:
		lv.Tokens = b.Tokens
	case b.Now >= full:
		lv.Tokens, lv.Full = float64(b.Burst), true
	default:
		lv.Tokens = Refill(b.Tokens, b.Updated, b.Now, lv.Rate, b.Burst)
	}
	return lv
}

// Inspect reads everything Redis holds for tenant (bucket, override,
// instance registry, the count of remembered release ids) in one
// read-only script call, at one instant of Redis's clock. It writes
// nothing and does not need WithInstance.
func (c *Client) Inspect(ctx context.Context, tenant string) (Inspection, error) {
	key := c.Key(tenant)
	cmd := inspectScript.run(ctx, c.s, inspectKeys(key), "1")
	in, err := c.parseInspect(key, cmd)
	if err != nil {
		return Inspection{}, fmt.Errorf("lease: inspect: %w", err)
	}
	in.Tenant, in.Named = tenant, true
	return in, nil
}

// ReadBuckets reads the buckets at keys (bucket keys under the client's
// prefix, as BucketSampler.Next returns them) and their overrides: one
// read-only script call each, in one pipeline (per master on a cluster).
// Each state has its own error in errs (nil when read); the call fails as
// a whole only when no key got a reply.
func (c *Client) ReadBuckets(ctx context.Context, keys []string) (states []BucketState, errs []error, err error) {
	if len(keys) == 0 {
		return nil, nil, nil // a SCAN page may hold no bucket
	}
	calls := make([]call, len(keys))
	for i, k := range keys {
		calls[i] = newCall(inspectKeys(k), "0")
	}
	cmds := inspectScript.runMany(ctx, c.s, calls)
	if err := commonFailure(cmds); err != nil {
		return nil, nil, fmt.Errorf("lease: read buckets: %w", err)
	}
	states = make([]BucketState, len(keys))
	errs = make([]error, len(keys))
	for i, cmd := range cmds {
		in, err := c.parseInspect(keys[i], cmd)
		if err != nil {
			errs[i] = fmt.Errorf("lease: read bucket %q: %w", keys[i], err)
			continue
		}
		states[i] = in.BucketState
	}
	return states, errs, nil
}

func inspectKeys(key string) []string {
	return []string{key, InstancesKey(key), QuotaKey(key), ReleasesKey(key)}
}

// parseInspect decodes inspect.lua's reply for the bucket at key.
func (c *Client) parseInspect(key string, cmd *redis.Cmd) (Inspection, error) {
	v, err := cmd.Result()
	if err != nil {
		return Inspection{}, err
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 6 {
		return Inspection{}, fmt.Errorf("%w: want a 6-element array, got %T %v", ErrBadReply, v, v)
	}
	var in Inspection
	in.Key = key
	if in.Now, err = replyInt(a[0]); err != nil {
		return Inspection{}, fmt.Errorf("%w: time: %w", ErrBadReply, err)
	}
	bucket, err := replyHash(a[1])
	if err != nil {
		return Inspection{}, fmt.Errorf("%w: bucket: %w", ErrBadReply, err)
	}
	if err := in.parseBucket(bucket); err != nil {
		return Inspection{}, fmt.Errorf("%w: bucket %q: %w", ErrBadReply, key, err)
	}
	ttl, err := replyInt(a[2])
	if err != nil {
		return Inspection{}, fmt.Errorf("%w: ttl: %w", ErrBadReply, err)
	}
	switch {
	case ttl > int64(maxTTL/time.Millisecond):
		// A bucket that refills for longer than a Duration holds
		// (store in common.lua keeps keys up to 1e15 ms): multiplied
		// out, its TTL wrapped, to a negative one (read as no expiry)
		// or a positive one decades short (read as a rate many times
		// the real one).
		in.TTL = maxTTL
	case ttl >= 0:
		in.TTL = time.Duration(ttl) * time.Millisecond
	case ttl == -1:
		in.TTL = -1
	}
	q, err := replyHash(a[3])
	if err != nil {
		return Inspection{}, fmt.Errorf("%w: override: %w", ErrBadReply, err)
	}
	var name string
	var named bool
	// Without both r and b the hash is no override, as the scripts read it
	// (read_override): not a bad reply.
	_, hasR := q["r"]
	_, hasB := q["b"]
	if hasR && hasB {
		fields := make([]interface{}, 6)
		for i, f := range overrideFields[:6] {
			v, ok := q[f]
			if !ok {
				v = "0"
			}
			fields[i] = v
		}
		o, err := parseOverride(fields)
		if err != nil || o == nil {
			return Inspection{}, fmt.Errorf("%w: override %q: %v", ErrBadReply, QuotaKey(key), err)
		}
		in.Override = o
		name, named = q["n"]
	}
	in.Tenant, in.Named = c.bucketTenant(key, name, named)
	reg, err := replyHash(a[4])
	if err != nil {
		return Inspection{}, fmt.Errorf("%w: registry: %w", ErrBadReply, err)
	}
	for id, entry := range reg {
		e, err := parseInstance(id, entry)
		if err != nil {
			return Inspection{}, fmt.Errorf("%w: registry %q: %w", ErrBadReply, InstancesKey(key), err)
		}
		in.Instances = append(in.Instances, e)
	}
	sort.Slice(in.Instances, func(i, j int) bool { return in.Instances[i].ID < in.Instances[j].ID })
	if in.Releases, err = replyInt(a[5]); err != nil {
		return Inspection{}, fmt.Errorf("%w: releases: %w", ErrBadReply, err)
	}
	return in, nil
}

// parseBucket fills the bucket's fields from its hash (see common.lua).
func (b *BucketState) parseBucket(h map[string]string) error {
	tk, hasTk := h["tk"]
	ts, hasTs := h["ts"]
	if !hasTk && !hasTs {
		return nil // missing (a hash without either is not one the scripts wrote)
	}
	b.Exists = true
	var err error
	// What read_bucket (common.lua) refuses as a corrupt bucket: a level
	// that is not a finite number, a time before 1970 or from 2^53 µs on.
	if b.Tokens, err = parseFinite(tk); err != nil {
		return fmt.Errorf("tk: %w", err)
	}
	if b.Updated, err = strconv.ParseInt(ts, 10, 64); err != nil {
		return fmt.Errorf("ts: %w", err)
	}
	if b.Updated < 0 || b.Updated >= 1<<53 {
		return fmt.Errorf("ts: %d is not a time the scripts write", b.Updated)
	}
	hb, hasHb := h["hb"]
	_, hasP1 := h["p1"]
	if hasHb || hasP1 {
		// The previous release's layout: a client of it wrote the bucket
		// last, and the scripts read these fields, not h (common.lua).
		if hasHb {
			if b.Burst, err = strconv.ParseInt(hb, 10, 64); err != nil {
				return fmt.Errorf("hb: %w", err)
			}
		}
		for i := 1; ; i++ {
			p, ok := h["p"+strconv.Itoa(i)]
			if !ok {
				break
			}
			t, l, ok := strings.Cut(p, ":")
			at, err1 := strconv.ParseInt(t, 10, 64)
			level, err2 := strconv.ParseFloat(l, 64)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("p%d: %q is not time:level", i, p)
			}
			b.History = append(b.History, HistoryEntry{At: at, Level: level})
		}
	} else if packed, ok := h["h"]; ok {
		hist, burst, ok := peaks.Unpack(packed, b.Updated)
		if !ok {
			return fmt.Errorf("h: %q is not a packed level history", packed)
		}
		b.Burst = burst
		for _, e := range hist.Entries() {
			b.History = append(b.History, HistoryEntry{At: e.T, Level: e.L})
		}
	}
	if sh, ok := h["sh"]; ok {
		if b.Shares, err = ParseShares(sh); err != nil {
			return fmt.Errorf("sh: %w", err)
		}
	}
	if rg, ok := h["rg"]; ok {
		if s, ok := parseSummary(rg); ok {
			b.Registry = &s
		}
	}
	return nil
}

// parseSummary reads acquire.lua's rg: "at:instances:demand:water level".
// ok is false for a summary acquire.lua would not use: one it does not
// write (instances not a whole number >= 1, a demand that is not a finite
// number >= 0, a water level not finite or below 0 but -1, or not four
// numbers). acquire.lua recomputes such a summary at its next call on the
// bucket, and no error comes of it, so it reads as none here too: read as
// numbers, "inf" and "nan" went to top's ranking and to JSON output,
// which refused them (no frame at all).
func parseSummary(rg string) (RegistrySummary, bool) {
	f := strings.Split(rg, ":")
	if len(f) != 4 {
		return RegistrySummary{}, false
	}
	at, err1 := strconv.ParseInt(f[0], 10, 64)
	n, err2 := strconv.Atoi(f[1])
	d, err3 := parseFinite(f[2])
	w, err4 := parseFinite(f[3])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || n < 1 || d < 0 || (w < 0 && w != -1) {
		return RegistrySummary{}, false
	}
	return RegistrySummary{At: at, Instances: n, Demand: d, WaterLevel: w}, true
}

// parseInstance reads a registry entry: "last acquire:demand:credit",
// and a fourth field when written by a client that honours rate shares
// (acquire.lua), which InstanceEntry.Shares reports.
func parseInstance(id, entry string) (InstanceEntry, error) {
	f := strings.Split(entry, ":")
	if len(f) != 3 && len(f) != 4 {
		return InstanceEntry{}, fmt.Errorf("entry %q of %q: want 3 or 4 fields", entry, id)
	}
	at, err1 := strconv.ParseInt(f[0], 10, 64)
	d, err2 := strconv.ParseFloat(f[1], 64)
	c, err3 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return InstanceEntry{}, fmt.Errorf("entry %q of %q: a field is not a number", entry, id)
	}
	e := InstanceEntry{ID: id, LastAcquire: at, Demand: d, Credit: c, Shares: len(f) == 4}
	if e.Shares {
		var err error
		if e.RateShare, err = parseRateShare(f[3]); err != nil {
			return InstanceEntry{}, fmt.Errorf("entry %q of %q: %w", entry, id, err)
		}
	}
	return e, nil
}

// replyHash reads an HGETALL reply (field, value, ...) as a map.
func replyHash(v interface{}) (map[string]string, error) {
	a, ok := v.([]interface{})
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("want a field-value array, got %T %v", v, v)
	}
	m := make(map[string]string, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		f, ok1 := a[i].(string)
		val, ok2 := a[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("want strings, got %T and %T", a[i], a[i+1])
		}
		m[f] = val
	}
	return m, nil
}

// bucketTenant returns the tenant of the bucket at key: the name stored
// with its override when named (and it encodes to key), else the tenant
// decoded from a percent-encoded key; false for a hashed key without a
// name, or a key that is not one of the prefix's buckets.
func (c *Client) bucketTenant(key, name string, named bool) (string, bool) {
	if named && c.Key(name) == key {
		return name, true
	}
	enc, ok := strings.CutPrefix(key, c.prefix+"{")
	if ok {
		enc, ok = strings.CutSuffix(enc, "}")
	}
	if !ok || strings.ContainsAny(enc, "{}") || strings.HasPrefix(enc, hashedTag) {
		return "", false
	}
	tenant, err := unescapeTenant(enc)
	if err != nil || c.Key(tenant) != key {
		return "", false
	}
	return tenant, true
}

// BucketSampler walks the buckets under a client's prefix a bounded
// number of keys at a time, for a view that must not scan the whole
// keyspace per refresh (cmd/leasequota top). A Next sends at most one
// SCAN to each master of a cluster (or to the one server) with a MATCH
// pattern of the prefix's bucket keys, continuing each node's cursor where
// the previous one left it, so successive calls cover the keyspace in
// turn. It is not safe for concurrent use.
type BucketSampler struct {
	c       *Client
	nodes   []scanner
	cursors []uint64
	wraps   []int    // per node, how many times its cursor came back to 0
	pending []string // keys SCAN returned beyond a Next's count
	passes  int
	base    int // the passes completed before the nodes were last listed (an error starts wraps over)
	scans   int
}

// NewBucketSampler returns a sampler of c's buckets.
func (c *Client) NewBucketSampler() *BucketSampler {
	return &BucketSampler{c: c}
}

// Passes returns how many times the sampler has returned every bucket
// key of every node: each node's cursor came back to 0 that many times,
// and every key those SCANs found was returned.
func (s *BucketSampler) Passes() int { return s.passes }

// Scans returns the number of SCAN calls sent so far.
func (s *BucketSampler) Scans() int { return s.scans }

// Next returns up to count bucket keys: first those an earlier SCAN
// returned beyond its count (SCAN may return somewhat more keys than its
// COUNT), then, when there is room, those of one SCAN per node with COUNT
// count divided among the nodes (at least 1 each), so that each call makes
// Redis look at about count keys in all. A key may be returned again in a
// later pass, or twice in one (SCAN's guarantees); a bucket that exists
// for a whole pass is returned in it. After an error the nodes are listed
// again at the next call, and their cursors restart.
func (s *BucketSampler) Next(ctx context.Context, count int) ([]string, error) {
	if count < 1 {
		return nil, fmt.Errorf("%w: sample count %d, want >= 1", ErrBadRequest, count)
	}
	keys := s.take(count)
	if len(keys) == count {
		s.settle()
		return keys, nil
	}
	if s.nodes == nil {
		nodes, err := s.c.scanners(ctx)
		if err != nil {
			return keys, err
		}
		s.nodes, s.cursors, s.wraps = nodes, make([]uint64, len(nodes)), make([]int, len(nodes))
	}
	per := max(1, count/len(s.nodes))
	match := escapeGlob(s.c.prefix) + "{*}"
	for i, n := range s.nodes {
		s.scans++
		got, next, err := n.Scan(ctx, s.cursors[i], match, int64(per)).Result()
		if err != nil {
			s.nodes, s.cursors, s.wraps, s.base = nil, nil, nil, s.passes
			return keys, fmt.Errorf("lease: sample buckets: scan: %w", err)
		}
		s.cursors[i] = next
		if next == 0 {
			s.wraps[i]++
		}
		s.pending = append(s.pending, got...)
	}
	keys = append(keys, s.take(count-len(keys))...)
	s.settle()
	return keys, nil
}

// settle counts the passes completed once every key the SCANs found has
// been returned: a Next that returns the last of them without a SCAN of
// its own completes a pass too.
func (s *BucketSampler) settle() {
	if len(s.pending) == 0 && len(s.wraps) > 0 {
		// wraps starts over after an error (the nodes are listed
		// again): the passes completed before it still count.
		s.passes = max(s.passes, s.base+slices.Min(s.wraps))
	}
}

// take removes up to n keys from pending and returns them.
func (s *BucketSampler) take(n int) []string {
	k := min(n, len(s.pending))
	out := slices.Clone(s.pending[:k])
	s.pending = s.pending[k:]
	return out
}

// Nodes returns the number of nodes a Next sends a SCAN to (0 before the
// first SCAN, or after an error).
func (s *BucketSampler) Nodes() int { return len(s.nodes) }
