package integration

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// The store conformance suite: one table of cases, each run against every
// lease.Store backend: Redis (one server, and a 3-master cluster) through
// lease.Client, and the in-process lease/memstore (with a clock that
// stands still, so every call on a bucket takes the microsecond after the
// previous one, and with one that ticks on every read).
//
// Each case checks its results against expectations of its own: a model
// of the bucket (the scripts' rules restated here, with internal/peaks for
// the level history) and of the instance registry, fed with the times the
// store reports for its calls (Grant.ServerTime, Return.ServerTime), so the
// expectations are exact on every backend however long Redis takes. Only
// where time is the subject (refill over a span, the registry window,
// expiry) does a case let time pass: a fake clock's step in memory, a real
// sleep on Redis; nothing waits for a condition.
//
// On Redis, every call is also replayed on a memstore "shadow" whose clock
// is set to the time Redis reported, and every reply must be identical,
// bit for bit; at the end of a case the keys in Redis must hold exactly
// what the shadow holds. So any drift between the Lua scripts and memstore
// fails here, whether or not a case's own checks look at it.

// confStart is where the memory backends' clocks start: 2027, in µs.
const confStart = 1_800_000_000_000_000

// confWindow is the registry window of the views that need no other.
const confWindow = time.Minute

// fakeClock is a settable clock for memstore: it returns its time and then
// moves it on by tick.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time // guarded by mu
	tick time.Duration
}

func (c *fakeClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.tick)
	return t
}

func (c *fakeClock) peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// confState is what a store keeps for a tenant, in the form of Redis's
// keys: the bucket's and the registry's hash fields, the release ids with
// their scores, the override's fields.
type confState struct {
	Bucket   map[string]string
	Registry map[string]string
	Releases map[string]int64
	Override map[string]string
}

// confSpace is a fresh keyspace of one backend: a new key prefix on Redis,
// a new memstore.Store in memory.
type confSpace interface {
	// newView returns instance id's view (no instance for ""), as
	// lease.NewClient with WithInstance(id, window) or
	// memstore.Store.Instance.
	newView(id string, window time.Duration) (lease.Store, error)
	// advance lets d of the store's time pass.
	advance(d time.Duration)
	// still reports whether the store's clock moves only by advance.
	still() bool
	// state returns what the store keeps for tenant.
	state(tenant string) confState
	// pttl returns the time to live of a key of tenant, in milliseconds
	// as PTTL gives it (-1: kept for ever, -2: missing), and the store's
	// time now; suffix is "" (the bucket), ":i" (registry) or ":r"
	// (release ids).
	pttl(tenant, suffix string) (ms int64, now time.Time)
	// lag puts the store's clock d behind tenant's bucket (a clock that
	// went back, or a failover to a lagging replica) and returns the
	// bucket's time as stored then, in µs. In memory the clock goes back;
	// Redis's cannot, so the bucket's time moves ahead instead, and the
	// shadow no longer follows the tenant.
	lag(tenant string, d time.Duration) int64
	// setShares records sh as the rate shares in force in tenant's bucket
	// (field sh, as a release that grants shares writes it), which must
	// exist: an HSET on Redis, memstore.Store.SetShares in memory.
	setShares(tenant string, sh lease.Shares)
	// final checks the keyspace at the end of a case.
	final()
}

// cx is a running case.
type cx struct {
	t    *testing.T
	ctx  context.Context
	sp   confSpace
	open func(t *testing.T) confSpace // another keyspace of the backend
}

func (c *cx) view(id string, window time.Duration) lease.Store {
	c.t.Helper()
	v, err := c.sp.newView(id, window)
	if err != nil {
		c.t.Fatalf("view %q: %v", id, err)
	}
	return v
}

// acquire acquires want for tenant through v, failing the case on an error.
func (c *cx) acquire(v lease.Store, tenant string, lim lease.Limits, want int64, demand float64) lease.Grant {
	c.t.Helper()
	res, err := v.AcquireMany(c.ctx, []lease.Request{{Tenant: tenant, Limits: lim, Want: want, Demand: demand}}, nil)
	if err != nil || len(res) != 1 || res[0].Err != nil {
		c.t.Fatalf("acquire %d of %q: %v, %+v", want, tenant, err, res)
	}
	return res[0].Grant
}

// release releases amount of tenant through v, failing the case on an
// error.
func (c *cx) release(v lease.Store, tenant string, lim lease.Limits, amount int64, age time.Duration, grant lease.GrantID) lease.Return {
	c.t.Helper()
	res := v.ReleaseMany(c.ctx, []lease.ReleaseRequest{{Tenant: tenant, Limits: lim, Amount: amount, Age: age, Grant: grant}})
	if len(res) != 1 || res[0].Err != nil {
		c.t.Fatalf("release %d of %q: %+v", amount, tenant, res)
	}
	return res[0].Return
}

// stored returns tenant's bucket as stored: tokens, time (µs), the burst
// of its history and the history; ok false when it is missing.
func (c *cx) stored(tenant string) (tk float64, ts, hb int64, h []peaks.Entry, ok bool) {
	c.t.Helper()
	f := c.sp.state(tenant).Bucket
	if f == nil {
		return 0, 0, 0, nil, false
	}
	var err1, err2 error
	tk, err1 = strconv.ParseFloat(f["tk"], 64)
	ts, err2 = strconv.ParseInt(f["ts"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		c.t.Fatalf("bucket of %q: %v: %v", tenant, f, err)
	}
	hist, hb, okh := peaks.Unpack(f["h"], ts)
	if !okh {
		c.t.Fatalf("bucket of %q: history %q does not unpack", tenant, f["h"])
	}
	return tk, ts, hb, slices.Clone(hist.Entries()), true
}

// checkStored fails unless tenant's stored bucket is the model's.
func (c *cx) checkStored(tenant string, m *confModel) {
	c.t.Helper()
	tk, ts, hb, h, ok := c.stored(tenant)
	if !ok && m.live {
		// Left alone, a bucket expires a second after it is full again:
		// a Redis slowed down that long may have got there.
		if _, now := c.sp.pttl(tenant, ""); us(now) >= m.expiry()-1000 {
			c.t.Logf("%q expired before it was read", tenant)
			m.forget()
			return
		}
	}
	if ok != m.live {
		c.t.Fatalf("%q stored: present %v, the model's %v", tenant, ok, m.live)
	}
	if !ok {
		return
	}
	if tk != m.tk || ts != m.ts || hb != m.hb || !slices.Equal(h, m.h.Entries()) {
		c.t.Fatalf("%q stored tk %v ts %d hb %d history %v;\nthe model's tk %v ts %d hb %d history %v", tenant, tk, ts, hb, h, m.tk, m.ts, m.hb, m.h.Entries())
	}
}

// unchanged fails unless what the store keeps for tenants and its quota
// version are as before, running what.
func (c *cx) unchanged(what string, v lease.Store, tenants []string, f func()) {
	c.t.Helper()
	before := make([]confState, len(tenants))
	for i, tn := range tenants {
		before[i] = c.sp.state(tn)
	}
	ver, err := v.QuotaVersion(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	f()
	for i, tn := range tenants {
		if after := c.sp.state(tn); !reflect.DeepEqual(after, before[i]) {
			c.t.Errorf("%s changed %q:\nbefore %+v\nafter  %+v", what, tn, before[i], after)
		}
	}
	if v2, err := v.QuotaVersion(c.ctx); err != nil || v2 != ver {
		c.t.Errorf("%s moved the quota version %d -> %d (%v)", what, ver, v2, err)
	}
}

// TestConformance runs every conformance case against every backend.
func TestConformance(t *testing.T) {
	// Beside TestClusterSparseTenantAfterFailover, after the package's
	// other tests: 9 s of wall time, 3 s of CPU, on keys and a cluster of
	// its own.
	t.Parallel()
	for _, b := range []struct {
		name  string
		setup func(t *testing.T) func(t *testing.T) confSpace
	}{
		{"memory", memBackend(0)},
		{"memory-ticking", memBackend(7 * time.Microsecond)},
		{"redis", redisStandalone},
		{"cluster", redisCluster},
	} {
		t.Run(b.name, func(t *testing.T) {
			open := b.setup(t)
			for _, cc := range conformanceCases() {
				t.Run(cc.name, func(t *testing.T) {
					t.Parallel()
					c := &cx{t: t, ctx: context.Background(), sp: open(t), open: open}
					cc.run(c)
					c.sp.final()
				})
			}
		})
	}
}

// memBackend is memstore with a fake clock that steps tick per read.
func memBackend(tick time.Duration) func(*testing.T) func(*testing.T) confSpace {
	return func(*testing.T) func(*testing.T) confSpace {
		return func(t *testing.T) confSpace {
			clock := &fakeClock{now: time.UnixMicro(confStart), tick: tick}
			return &memSpace{t: t, clock: clock, s: memstore.New(memstore.WithClock(clock.read))}
		}
	}
}

type memSpace struct {
	t     *testing.T
	clock *fakeClock
	s     *memstore.Store
}

func (sp *memSpace) newView(id string, window time.Duration) (lease.Store, error) {
	v, err := sp.s.Instance(id, window)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (sp *memSpace) advance(d time.Duration) { sp.clock.add(d) }
func (sp *memSpace) still() bool             { return sp.clock.tick == 0 }
func (sp *memSpace) state(tenant string) confState {
	return memState(tenant, sp.s.Tenant(tenant))
}
func (sp *memSpace) final() {}
func (sp *memSpace) setShares(tenant string, sh lease.Shares) {
	if err := sp.s.SetShares(tenant, sh); err != nil {
		sp.t.Fatal(err)
	}
}

func (sp *memSpace) lag(tenant string, d time.Duration) int64 {
	sp.clock.add(-d)
	b := sp.s.Tenant(tenant).Bucket
	if b == nil {
		sp.t.Fatalf("lag: %q has no bucket", tenant)
	}
	return us(b.Time)
}

func (sp *memSpace) pttl(tenant, suffix string) (int64, time.Time) {
	now := sp.clock.peek()
	st := sp.s.Tenant(tenant)
	var exp time.Time
	switch {
	case suffix == "" && st.Bucket != nil:
		exp = st.Bucket.Expires
	case suffix == ":i" && st.Instances != nil:
		exp = st.InstancesExpire
	case suffix == ":r" && st.Releases != nil:
		exp = st.ReleasesExpire
	default:
		return -2, now
	}
	if exp.IsZero() {
		return -1, now
	}
	return exp.UnixMilli() - now.UnixMilli(), now
}

// memState is st, tenant's state, in the form of Redis's keys, as the
// scripts write them.
func memState(tenant string, st memstore.TenantState) confState {
	var s confState
	if b := st.Bucket; b != nil {
		s.Bucket = map[string]string{
			"tk": fmt.Sprintf("%.17g", b.Tokens),
			"ts": strconv.FormatInt(us(b.Time), 10),
		}
		if len(b.History) > 0 {
			// Packed as common.lua packs it (memstore has merged it to
			// fit already).
			var h peaks.History
			h.Reset(us(b.History[0].Time), b.History[0].Tokens)
			for _, l := range b.History[1:] {
				h.Push(us(l.Time), l.Tokens)
			}
			v, ok := h.Pack(us(b.Time), b.Burst)
			if !ok || h.Len() != len(b.History) {
				panic(fmt.Sprintf("memstore's history %v under %d does not pack as it is", b.History, b.Burst))
			}
			s.Bucket["h"] = v
		}
		if r := b.Summary; r != nil {
			s.Bucket["rg"] = fmt.Sprintf("%d:%d:%.17g:%.17g", us(r.At), r.Instances, r.Demand, r.Level)
		}
		if b.Shares != (lease.Shares{}) {
			s.Bucket["sh"] = b.Shares.String()
		}
	}
	if len(st.Instances) > 0 {
		s.Registry = map[string]string{}
		for id, r := range st.Instances {
			// The fourth field is the rate share granted last.
			s.Registry[id] = fmt.Sprintf("%d:%.17g:%.17g:", us(r.Seen), r.Demand, r.Credit) + r.Share.String()
		}
	}
	if len(st.Releases) > 0 {
		s.Releases = map[string]int64{}
		for _, r := range st.Releases {
			s.Releases[r.ID] = us(r.At)
		}
	}
	if o := st.Override; o != nil {
		s.Override = map[string]string{
			"r": strconv.FormatFloat(o.Rate, 'f', -1, 64), "b": strconv.FormatInt(o.Burst, 10),
			"min": strconv.FormatInt(o.MinLease, 10), "max": strconv.FormatInt(o.MaxLease, 10),
			"ttl": strconv.FormatInt(int64(o.LeaseTTL), 10), "mode": strconv.FormatInt(int64(o.Mode), 10),
			"n": tenant,
		}
	}
	return s
}

// redisStandalone is the package's shared Redis server.
func redisStandalone(t *testing.T) func(*testing.T) confSpace {
	redistest.Shared(t)
	return func(t *testing.T) confSpace { return newRedisSpace(t, redistest.Client(t)) }
}

// redisCluster is a 3-master cluster (with a replica each) of the
// backend's own.
func redisCluster(t *testing.T) func(*testing.T) confSpace {
	rdb := redistest.StartCluster(t).Client()
	return func(t *testing.T) confSpace { return newRedisSpace(t, rdb) }
}

// redisSpace is a key prefix on a Redis, with the memstore shadow that
// replays every call.
type redisSpace struct {
	t      *testing.T
	rdb    redis.UniversalClient
	prefix string
	clock  *fakeClock // the shadow's: set to each call's time in Redis
	shadow *memstore.Store

	mu      sync.Mutex
	touched map[string]bool // guarded by mu: tenants called
	skewed  map[string]bool // guarded by mu: tenants the shadow cannot follow
}

func newRedisSpace(t *testing.T, rdb redis.UniversalClient) *redisSpace {
	clock := &fakeClock{}
	return &redisSpace{t: t, rdb: rdb, prefix: redistest.Prefix(t), clock: clock,
		shadow: memstore.New(memstore.WithClock(clock.read)), touched: map[string]bool{}, skewed: map[string]bool{}}
}

// touch records a call on tenant and reports whether the shadow follows
// it.
func (sp *redisSpace) touch(tenant string) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.touched[tenant] = true
	return !sp.skewed[tenant]
}

// bucketHistory reads the bucket at key's ts and its packed level
// history h: the history, the burst it was recorded under, ts, and h as
// stored.
func bucketHistory(tb testing.TB, rdb redis.Cmdable, key string) (h peaks.History, burst, ts int64, packed string) {
	tb.Helper()
	f, err := rdb.HMGet(context.Background(), key, "ts", "h").Result()
	if err != nil {
		tb.Fatal(err)
	}
	if ts, err = strconv.ParseInt(fmt.Sprint(f[0]), 10, 64); err != nil {
		tb.Fatalf("%s: ts %v: %v", key, f[0], err)
	}
	packed = fmt.Sprint(f[1])
	h, burst, ok := peaks.Unpack(packed, ts)
	if !ok {
		tb.Fatalf("%s: history %q does not unpack", key, packed)
	}
	return h, burst, ts, packed
}

func (sp *redisSpace) lag(tenant string, d time.Duration) int64 {
	ctx := context.Background()
	sp.mu.Lock()
	sp.skewed[tenant] = true
	sp.mu.Unlock()
	// ts moves ahead of the clock by d; the level history's times, which
	// h holds as distances back from ts, stay where they were.
	key := lease.Key(sp.prefix, tenant)
	h, burst, ts, _ := bucketHistory(sp.t, sp.rdb, key)
	ts += d.Microseconds()
	v, ok := h.Pack(ts, burst)
	if !ok {
		sp.t.Fatalf("lag: history %v does not pack", h.Entries())
	}
	if err := sp.rdb.HSet(ctx, key, "ts", ts, "h", v).Err(); err != nil {
		sp.t.Fatal(err)
	}
	return ts
}

func (sp *redisSpace) newView(id string, window time.Duration) (lease.Store, error) {
	var opts []lease.ClientOption
	if id != "" {
		opts = append(opts, lease.WithInstance(id, window))
	}
	c, err := lease.NewClient(sp.rdb, sp.prefix, opts...)
	m, merr := sp.shadow.Instance(id, window)
	// The constructors name their own option; the kind must agree.
	if (err == nil) != (merr == nil) || err != nil && !(errors.Is(err, lease.ErrBadRequest) && errors.Is(merr, lease.ErrBadRequest)) {
		sp.t.Errorf("view %q, window %v: Redis client %v, memstore %v", id, window, err, merr)
	}
	if err != nil {
		return nil, err
	}
	if merr != nil {
		return nil, merr
	}
	return &shadowed{sp: sp, real: c, mem: m}, nil
}

func (sp *redisSpace) setShares(tenant string, sh lease.Shares) {
	if err := sp.rdb.HSet(context.Background(), lease.Key(sp.prefix, tenant), "sh", sh.String()).Err(); err != nil {
		sp.t.Fatal(err)
	}
	sp.clock.set(sp.serverTime())
	if err := sp.shadow.SetShares(tenant, sh); err != nil {
		sp.t.Fatal(err)
	}
}

func (sp *redisSpace) advance(d time.Duration) { time.Sleep(d) }
func (sp *redisSpace) still() bool             { return false }

func (sp *redisSpace) serverTime() time.Time {
	now, err := sp.rdb.Time(context.Background()).Result()
	if err != nil {
		sp.t.Fatal(err)
	}
	return now
}

func (sp *redisSpace) pttl(tenant, suffix string) (int64, time.Time) {
	ms, err := sp.rdb.Do(context.Background(), "PTTL", lease.Key(sp.prefix, tenant)+suffix).Int64()
	if err != nil {
		sp.t.Fatal(err)
	}
	return ms, sp.serverTime()
}

func (sp *redisSpace) state(tenant string) confState {
	ctx := context.Background()
	key := lease.Key(sp.prefix, tenant)
	hash := func(k string) map[string]string {
		m, err := sp.rdb.HGetAll(ctx, k).Result()
		if err != nil {
			sp.t.Fatal(err)
		}
		if len(m) == 0 {
			return nil
		}
		return m
	}
	s := confState{Bucket: hash(key), Registry: hash(lease.InstancesKey(key)), Override: hash(lease.QuotaKey(key))}
	zs, err := sp.rdb.ZRangeWithScores(ctx, lease.ReleasesKey(key), 0, -1).Result()
	if err != nil {
		sp.t.Fatal(err)
	}
	for _, z := range zs {
		if s.Releases == nil {
			s.Releases = map[string]int64{}
		}
		s.Releases[z.Member.(string)] = int64(z.Score)
	}
	return s
}

// final compares every key the case touched with the shadow's, as of
// Redis's time, but for keys that expire while they are read.
func (sp *redisSpace) final() {
	sp.mu.Lock()
	var tenants []string
	for tn := range sp.touched {
		if !sp.skewed[tn] {
			tenants = append(tenants, tn)
		}
	}
	sp.mu.Unlock()
	slices.Sort(tenants)
	ctx := context.Background()
	key := func(tn string) string { return lease.Key(sp.prefix, tn) }
	for _, tn := range tenants {
		t0 := sp.serverTime()
		got := sp.state(tn)
		var pttls [3]int64
		for i, k := range []string{key(tn), lease.InstancesKey(key(tn)), lease.ReleasesKey(key(tn))} {
			var err error
			if pttls[i], err = sp.rdb.Do(ctx, "PTTL", k).Int64(); err != nil {
				sp.t.Fatal(err)
			}
		}
		t1 := sp.serverTime()
		sp.clock.set(t0)
		st := sp.shadow.Tenant(tn)
		want := memState(tn, st)
		near := func(exp time.Time) bool {
			return !exp.IsZero() && exp.UnixMilli() >= t0.UnixMilli()-2 && exp.UnixMilli() <= t1.UnixMilli()+2
		}
		if st.Bucket != nil && near(st.Bucket.Expires) {
			got.Bucket, want.Bucket = nil, nil
		}
		if near(st.InstancesExpire) {
			got.Registry, want.Registry = nil, nil
		}
		if near(st.ReleasesExpire) {
			got.Releases, want.Releases = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			sp.t.Errorf("tenant %q: Redis holds\n%+v\nthe memstore shadow\n%+v", tn, got, want)
		}
		// Redis counts a key's expiry from its clock at the PEXPIRE (since
		// Redis 7.2, the script's start, up to a millisecond before the
		// TIME the call reported, which the shadow counts from; before,
		// the PEXPIRE itself, after the TIME by as long as the script was
		// held up, which on a loaded machine can be milliseconds). So the
		// bounds are a millisecond below and a generous allowance above;
		// the exact TTLs are checked by the expiry case, against the
		// model on Redis and to the millisecond in memory.
		var bucketExp time.Time
		if st.Bucket != nil {
			bucketExp = st.Bucket.Expires
		}
		for i, k := range []struct {
			live bool
			exp  time.Time
		}{{st.Bucket != nil, bucketExp}, {st.Instances != nil, st.InstancesExpire}, {st.Releases != nil, st.ReleasesExpire}} {
			switch {
			case !k.live || near(k.exp):
			case k.exp.IsZero():
				if pttls[i] != -1 {
					sp.t.Errorf("tenant %q, key %d: PTTL %d, the shadow keeps it for ever", tn, i, pttls[i])
				}
			default:
				const held = 100 // ms
				lo, hi := k.exp.UnixMilli()-1-t1.UnixMilli(), k.exp.UnixMilli()+held-t0.UnixMilli()
				if pttls[i] < lo || pttls[i] > hi {
					sp.t.Errorf("tenant %q, key %d: PTTL %d, the shadow's expiry says %d..%d", tn, i, pttls[i], lo, hi)
				}
			}
		}
	}
}

// shadowed is a lease.Client whose every call is replayed on a memstore
// view at the time Redis reported, and checked to give the same result.
type shadowed struct {
	sp   *redisSpace
	real *lease.Client
	mem  lease.Store
}

// sameErr reports whether a and b are both nil, or both errors of the
// same kind: the same bad request, or the same context error.
func sameErr(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	if errors.Is(a, lease.ErrBadRequest) || errors.Is(b, lease.ErrBadRequest) {
		return errors.Is(a, lease.ErrBadRequest) && errors.Is(b, lease.ErrBadRequest) && a.Error() == b.Error()
	}
	for _, kind := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(a, kind) || errors.Is(b, kind) {
			return errors.Is(a, kind) && errors.Is(b, kind)
		}
	}
	return false
}

func sameGrant(a, b lease.Grant) bool {
	return a.Granted == b.Granted && a.Tokens == b.Tokens && a.ServerTime.Equal(b.ServerTime) &&
		a.Instances == b.Instances && a.Share == b.Share && reflect.DeepEqual(a.Override, b.Override) &&
		a.Reserved == b.Reserved && a.Pace == b.Pace && a.Wait == b.Wait && a.RateShare.Equal(b.RateShare)
}

func sameReturn(a, b lease.Return) bool {
	return a.Credited == b.Credited && a.Tokens == b.Tokens && a.ServerTime.Equal(b.ServerTime)
}

func (v *shadowed) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	res, err := v.real.AcquireMany(ctx, reqs, results)
	for i, r := range reqs {
		if !v.sp.touch(r.Tenant) {
			continue
		}
		if res[i].Err == nil {
			// Redis's clock: a frozen bucket's time is ahead of it.
			v.sp.clock.set(res[i].Grant.ServerTime.Add(-res[i].Grant.Wait))
		}
		m, _ := v.mem.AcquireMany(ctx, []lease.Request{r}, nil)
		if !sameErr(res[i].Err, m[0].Err) || res[i].Err == nil && !sameGrant(res[i].Grant, m[0].Grant) {
			v.sp.t.Errorf("acquire %+v:\nRedis    %+v, %v\nmemstore %+v, %v", r, res[i].Grant, res[i].Err, m[0].Grant, m[0].Err)
		}
	}
	return res, err
}

func (v *shadowed) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	// A release's reply has the bucket's time, not the clock's: on a
	// frozen bucket (ahead of the clock after the call) the shadow takes
	// Redis's clock from before the call, which makes the release ids'
	// expiry a little earlier than Redis's (within the PTTL check's
	// allowance); the bucket's time is ts + 1 µs either way. The grant's
	// time may depend on the clock too (an age counted back from it): when
	// a level of the history lies between the times the span of clocks
	// gives, the shadow cannot know which credit Redis's clock made, and
	// stops following the tenant (clockDecides).
	before := v.sp.serverTime()
	res := v.real.ReleaseMany(ctx, reqs)
	after := v.sp.serverTime()
	for i, r := range reqs {
		// A tenant the shadow does not follow is released there all the
		// same, uncompared: a view's release ids count its releases.
		follows := v.sp.touch(r.Tenant)
		if follows && res[i].Err == nil && !res[i].Return.ServerTime.IsZero() {
			switch {
			case !res[i].Return.ServerTime.After(after):
				v.sp.clock.set(res[i].Return.ServerTime)
			case v.clockDecides(r, res[i].Return, before, after):
				v.sp.mu.Lock()
				v.sp.skewed[r.Tenant] = true
				v.sp.mu.Unlock()
				v.sp.t.Logf("release %+v into a frozen bucket: its grant's time depends on Redis's clock in the call, which the reply does not give; the shadow no longer follows %q", r, r.Tenant)
				follows = false
			default:
				v.sp.clock.set(before)
			}
		}
		m := v.mem.ReleaseMany(ctx, []lease.ReleaseRequest{r})
		if follows && (!sameErr(res[i].Err, m[0].Err) || res[i].Err == nil && !sameReturn(res[i].Return, m[0].Return)) {
			v.sp.t.Errorf("release %+v:\nRedis    %+v, %v\nmemstore %+v, %v", r, res[i].Return, res[i].Err, m[0].Return, m[0].Err)
		}
	}
	return res
}

// clockDecides reports whether release r, which Redis answered with ret
// on a frozen bucket (its time ahead of Redis's clock, which the reply
// does not give: somewhere in [before, after]), may have been credited
// differently at different clocks in that span: the grant's time (an age
// counted back from the clock, peaks.GrantTime) may fall on either side
// of a level in the bucket's history, and the credit's peak and raise
// take the levels after it. Replayed at before, such a release may give
// another credit, or the same one raising other levels.
func (v *shadowed) clockDecides(r lease.ReleaseRequest, ret lease.Return, before, after time.Time) bool {
	b := v.sp.shadow.Tenant(r.Tenant).Bucket
	if b == nil {
		return false
	}
	now := us(ret.ServerTime)
	age := r.Age.Milliseconds() * 1000
	if r.Age%time.Millisecond != 0 {
		age += 1000
	}
	lo := peaks.GrantTime(now, us(before), age, uint32(r.Grant))
	hi := peaks.GrantTime(now, us(after), age, uint32(r.Grant))
	lo, hi = min(lo, hi), max(lo, hi)
	for _, l := range b.History {
		if t := us(l.Time); t > lo && t <= hi {
			return true
		}
	}
	return false
}

// CountInstances counts on Redis, then on the shadow at Redis's time
// after the call: the two agree unless an entry expires in between, which
// the roster case keeps well away from.
func (v *shadowed) CountInstances(ctx context.Context) (int, error) {
	n, err := v.real.CountInstances(ctx)
	v.sp.clock.set(v.sp.serverTime())
	m, merr := v.mem.(lease.InstanceCounter).CountInstances(ctx)
	if !sameErr(err, merr) || n != m {
		v.sp.t.Errorf("count instances: Redis %d, %v; memstore %d, %v", n, err, m, merr)
	}
	return n, err
}

// LeaveRoster leaves on Redis, then on the shadow: both agree on the
// error, and the counts after it (CountInstances) on the roster.
func (v *shadowed) LeaveRoster(ctx context.Context) error {
	err := v.real.LeaveRoster(ctx)
	merr := v.mem.(lease.RosterLeaver).LeaveRoster(ctx)
	if !sameErr(err, merr) {
		v.sp.t.Errorf("leave the roster: Redis %v; memstore %v", err, merr)
	}
	return err
}

func (v *shadowed) GetOverride(ctx context.Context, tenant string) (*lease.Override, error) {
	o, err := v.real.GetOverride(ctx, tenant)
	m, merr := v.mem.GetOverride(ctx, tenant)
	if !sameErr(err, merr) || !reflect.DeepEqual(o, m) {
		v.sp.t.Errorf("get quota of %q: Redis %+v, %v; memstore %+v, %v", tenant, o, err, m, merr)
	}
	return o, err
}

// quotaTime sets the shadow's clock to the time of tenant's last quota
// change in Redis: the bucket's time, which the script wrote.
func (v *shadowed) quotaTime(tenant string) {
	ts, err := v.sp.rdb.HGet(context.Background(), lease.Key(v.sp.prefix, tenant), "ts").Int64()
	if err != nil {
		v.sp.t.Fatalf("bucket time after a quota change: %v", err)
	}
	v.sp.clock.set(time.UnixMicro(ts))
}

func (v *shadowed) SetOverride(ctx context.Context, tenant string, base lease.Limits, o lease.Override) (float64, error) {
	// On a tenant the shadow does not follow, the override is stored in
	// both all the same (ListOverrides and QuotaVersion compare them);
	// the tokens, from buckets that differ, are not compared.
	follows := v.sp.touch(tenant)
	tokens, err := v.real.SetOverride(ctx, tenant, base, o)
	if err == nil && follows {
		v.quotaTime(tenant)
	}
	m, merr := v.mem.SetOverride(ctx, tenant, base, o)
	if !sameErr(err, merr) || follows && tokens != m {
		v.sp.t.Errorf("set quota of %q to %+v: Redis %v, %v; memstore %v, %v", tenant, o, tokens, err, m, merr)
	}
	return tokens, err
}

func (v *shadowed) DeleteOverride(ctx context.Context, tenant string, base lease.Limits) (float64, error) {
	follows := v.sp.touch(tenant) // as SetOverride
	tokens, err := v.real.DeleteOverride(ctx, tenant, base)
	if err == nil && follows {
		v.quotaTime(tenant)
	}
	m, merr := v.mem.DeleteOverride(ctx, tenant, base)
	if !sameErr(err, merr) || follows && tokens != m {
		v.sp.t.Errorf("delete quota of %q: Redis %v, %v; memstore %v, %v", tenant, tokens, err, m, merr)
	}
	return tokens, err
}

// ListOverrides lists Redis's overrides, and checks that the shadow
// lists the same ones (SCAN's order aside, and a key it yields twice),
// each under the key its prefix gives.
func (v *shadowed) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	return func(yield func(lease.ListedOverride, error) bool) {
		var got []lease.ListedOverride
		var gotErr error
		stopped := false
		for lo, err := range v.real.ListOverrides(ctx) {
			if err != nil {
				gotErr = err
			} else if !slices.Contains(got, lo) {
				got = append(got, lo)
			}
			if !yield(lo, err) {
				stopped = true
				break
			}
		}
		if stopped {
			return
		}
		var want []lease.ListedOverride
		var wantErr error
		for lo, err := range v.mem.ListOverrides(ctx) {
			if err != nil {
				wantErr = err
				continue
			}
			lo.Key = strings.Replace(lo.Key, "{", v.sp.prefix+"{", 1)
			want = append(want, lo)
		}
		byTenant := func(a, b lease.ListedOverride) int { return strings.Compare(a.Tenant, b.Tenant) }
		slices.SortFunc(got, byTenant)
		if !sameErr(gotErr, wantErr) || gotErr == nil && !slices.Equal(got, want) {
			v.sp.t.Errorf("list overrides:\nRedis    %+v, %v\nmemstore %+v, %v", got, gotErr, want, wantErr)
		}
	}
}

func (v *shadowed) QuotaVersion(ctx context.Context) (int64, error) {
	n, err := v.real.QuotaVersion(ctx)
	m, merr := v.mem.QuotaVersion(ctx)
	if !sameErr(err, merr) || n != m {
		v.sp.t.Errorf("quota version: Redis %d, %v; memstore %d, %v", n, err, m, merr)
	}
	return n, err
}

// confCase is one case of the suite.
type confCase struct {
	name string
	run  func(c *cx)
}

func conformanceCases() []confCase {
	return []confCase{
		{"partial grants", confPartialGrants},
		{"refill", confRefill},
		{"refill rounding", confRefillRounding},
		{"clock behind the bucket", confClockBehind},
		{"rising times", confRisingTimes},
		{"batches", confBatches},
		{"aged returns", confAgedReturns},
		{"age rounds up", confAgeRoundsUp},
		{"history merges", confHistoryMerges},
		{"burst change", confBurstChange},
		{"overrides", confOverrides},
		{"quota version", confQuotaVersion},
		{"list overrides", confListOverrides},
		{"fair shares", confFairShares},
		{"registry summary", confRegistrySummary},
		{"half full", confHalfFull},
		{"credit span", confCreditSpan},
		{"instance window", confInstanceWindow},
		{"registry join", confRegistryJoin},
		{"registry never shortened", confRegistryNeverShortened},
		{"expiry", confExpiry},
		{"release into a missing bucket", confReleaseMissing},
		{"release ids", confReleaseIDs},
		{"tenants apart", confTenantsApart},
		{"bad arguments", confBadArguments},
		{"canceled context", confCanceled},
		{"reservations", confReservations},
		{"reservations-held", confReservationsHeld},
		{"frozen release age", confFrozenReleaseAge},
		{"rate shares", confShares},
		{"rate share grants", confShareGrants},
		{"rate share among the instances expected", confShareInstances},
		{"rate share outlives the window", confShareOutlivesWindow},
		{"instance roster", confInstanceRoster},
		{"reservation edges", confReservationEdges},
		{"rate share edges", confShareEdges},
		{"edges mixed", confEdgesMixed},
		{"credit overflow", confCreditOverflow},
	}
}

// checkGrant fails unless g is what the model expects.
func (c *cx) checkGrant(what string, g lease.Grant, granted int64, tokens float64) {
	c.t.Helper()
	if g.Granted != granted || g.Tokens != tokens {
		c.t.Fatalf("%s: granted %d, %v left; the model: %d, %v left", what, g.Granted, g.Tokens, granted, tokens)
	}
}

// checkReturn fails unless r is what the model expects.
func (c *cx) checkReturn(what string, r lease.Return, credit, tokens float64) {
	c.t.Helper()
	if r.Credited != credit || r.Tokens != tokens {
		c.t.Fatalf("%s: credited %v, %v in the bucket; the model: %v, %v", what, r.Credited, r.Tokens, credit, tokens)
	}
}
