package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/internal/redisserver"
)

// The scripts of earlier releases, for the rollout tests: v1 is main at
// e93ce47, before the registry summary (every acquire read and rewrote
// the whole instance registry); v2 is main at c21efec, before the batch
// form of acquire.lua (one tenant per call) and before quota.lua stored
// the tenant's name with an override; v3 is main at d243102, before the
// lean acquire (it parsed the history of a full bucket, read a missing
// override with HMGET and the registry entry before a stale summary's
// recompute), whose fields and values v4 writes the same; v4 is main at
// 7eccc49, the last to keep the level history as hb and p1..p8 (one
// "time:level" field an entry, levels exact) where later releases pack it
// in one field, h, levels rounded up to a grid (whole tokens from 128 up,
// 8 significant bits below); v5 is main at 3eff625, the last whose
// credit was at most an instance's share of the burst (this release's
// may accrue for half the caller's window: the credit span); v6 is main
// at d6ce5ab, the last to neither honour a bucket's record of rate shares
// (field sh) nor write registry entries of four fields; v7 is main at
// a99e078, the first to honour them, the last to grant none; v8 is main
// at d76ea2a, the last to reply to an acquire with an array (this
// release's reply is one string; what it stores is the same); v9 is main
// at 0c73073, the last to drop the registry entry of an instance holding a
// rate share in force once it is a window old (and to keep the registry
// two windows only, however long the shares in force run); v10 is main at
// d6fa13d, the last whose release counted a return's age back from the
// bucket's time, where this release counts it back from Redis's clock,
// and the last whose acquire set the registry's TTL to twice the caller's
// window, shortening what a longer window had kept it for (this release
// only ever extends it); v11 is main at 959c7b1, the last whose release
// took a named grant's low bits for the latest such time whenever the
// age alone was below 2^32 µs, though the bucket's time may run ahead of
// the clock (this release counts from clock - age to the bucket's time),
// and whose acquire used a registry of numbers no call writes (NaN,
// infinities, negative credits) as it found them, kept an entry however
// old whose share ran past every record of shares (until inf), and took a
// registry window past 2^63 ms; v12 is main at 89ddf54, the last whose
// acquire wrote an instance's credit capacity as it computed it
// (burst × share / rate, inf when that overflows, an entry every release
// reads as empty) where this release caps it at 2^53 (lease.MaxCredit);
// v13 is main at 87b0a80, the last whose new instance's first acquire
// recomputed the registry summary from every entry, where this release's
// joins a summary whose demands are all met and stay met with its own
// (one more instance, its demand added, the summary's time kept).
var (
	//go:embed testdata/v1/common.lua
	v1Common string
	//go:embed testdata/v1/acquire.lua
	v1Acquire string
	//go:embed testdata/v1/release.lua
	v1Release string
	//go:embed testdata/v2/common.lua
	v2Common string
	//go:embed testdata/v2/acquire.lua
	v2Acquire string
	//go:embed testdata/v2/release.lua
	v2Release string
	//go:embed testdata/v3/common.lua
	v3Common string
	//go:embed testdata/v3/acquire.lua
	v3Acquire string
	//go:embed testdata/v3/release.lua
	v3Release string
	//go:embed testdata/v4/common.lua
	v4Common string
	//go:embed testdata/v4/acquire.lua
	v4Acquire string
	//go:embed testdata/v4/release.lua
	v4Release string
	//go:embed testdata/v5/common.lua
	v5Common string
	//go:embed testdata/v5/acquire.lua
	v5Acquire string
	//go:embed testdata/v5/release.lua
	v5Release string
	//go:embed testdata/v6/common.lua
	v6Common string
	//go:embed testdata/v6/acquire.lua
	v6Acquire string
	//go:embed testdata/v6/release.lua
	v6Release string
	//go:embed testdata/v7/common.lua
	v7Common string
	//go:embed testdata/v7/acquire.lua
	v7Acquire string
	//go:embed testdata/v8/common.lua
	v8Common string
	//go:embed testdata/v8/acquire.lua
	v8Acquire string
	//go:embed testdata/v9/common.lua
	v9Common string
	//go:embed testdata/v9/acquire.lua
	v9Acquire string
	//go:embed testdata/v10/common.lua
	v10Common string
	//go:embed testdata/v10/acquire.lua
	v10Acquire string
	//go:embed testdata/v10/release.lua
	v10Release string
	//go:embed testdata/v11/common.lua
	v11Common string
	//go:embed testdata/v11/release.lua
	v11Release string
	//go:embed testdata/v11/acquire.lua
	v11Acquire string
	//go:embed testdata/v12/common.lua
	v12Common string
	//go:embed testdata/v12/release.lua
	v12Release string
	//go:embed testdata/v12/acquire.lua
	v12Acquire string
	//go:embed testdata/v13/acquire.lua
	v13Acquire string // its common.lua and release.lua are v12's
)

// TestMixedFleetRollout runs clients of an earlier release and of this
// one on the same tenant at once, as during a rolling upgrade (or a
// rollback): the bound holds over everything both granted, less what
// both sides' returns credited, and each side counts the other's
// instances. This release's clients send batches (WithBatch) that name
// the tenant twice, next to another tenant, and reserve with a horizon
// of a second (the most a mixed fleet allows): their reserved tokens
// count from when their schedule lets them be spent, and only those
// spendable by the end of the run. Their registry window is three times
// the old clients' (the root package's is six lease lifetimes where the
// releases before the credit span had two), long enough that their
// credit may accrue past their share of the burst (acquire.lua's credit
// span), while the old clients' shorter window drops their entries
// sooner. Beside v10, the last release whose acquire cut the registry's
// TTL to its own two windows, it runs a second time with this release's
// window a third of the old clients' (v10-shorter): their recomputes
// leave the old clients' longer TTL as it is. And a third time on a
// redis-server of its own whose ACL refuses PTTL, as one written for
// v10's commands does (v10-acl): both sides' calls all succeed
// (TestAcquireBesideAnACLWithoutPTTL). Beside v13, the last whose new
// instance recomputed the summary, it runs a second time with demands
// that add up to less than the rate (v13-under), where this release's
// new instances join the summary that v13's recomputes wrote.
func TestMixedFleetRollout(t *testing.T) {
	for _, old := range []struct {
		name, common, acquire, release string
		reply                          int  // elements in its acquire's reply; 0: one string
		shorter                        bool // this release's window a third of the old one's
		acl                            bool // an ACL of v10's commands: no PTTL
		under                          bool // demands that add up to less than the rate
	}{
		{name: "v1", common: v1Common, acquire: v1Acquire, release: v1Release, reply: 6},
		{name: "v2", common: v2Common, acquire: v2Acquire, release: v2Release, reply: 6},
		{name: "v3", common: v3Common, acquire: v3Acquire, release: v3Release, reply: 9},
		{name: "v4", common: v4Common, acquire: v4Acquire, release: v4Release, reply: 9},
		{name: "v5", common: v5Common, acquire: v5Acquire, release: v5Release, reply: 9},
		{name: "v6", common: v6Common, acquire: v6Acquire, release: v6Release, reply: 9},
		{name: "v7", common: v7Common, acquire: v7Acquire, release: v6Release, reply: 9},  // v7's release.lua is v6's
		{name: "v8", common: v8Common, acquire: v8Acquire, release: v6Release, reply: 10}, // and v8's
		{name: "v9", common: v9Common, acquire: v9Acquire, release: v10Release},           // v9's is v10's
		{name: "v10", common: v10Common, acquire: v10Acquire, release: v10Release},
		{name: "v10-shorter", common: v10Common, acquire: v10Acquire, release: v10Release, shorter: true},
		{name: "v10-acl", common: v10Common, acquire: v10Acquire, release: v10Release, acl: true},
		{name: "v11", common: v11Common, acquire: v11Acquire, release: v11Release},
		{name: "v12", common: v12Common, acquire: v12Acquire, release: v12Release},
		{name: "v13", common: v12Common, acquire: v13Acquire, release: v12Release}, // v13's common.lua and release.lua are v12's
		{name: "v13-under", common: v12Common, acquire: v13Acquire, release: v12Release, under: true},
	} {
		t.Run(old.name, func(t *testing.T) {
			// Two at a time (-parallel is GOMAXPROCS): each runs 1.2 s
			// of wall time on keys of its own, and its bound is taken
			// in Redis time, which a busier server does not loosen.
			t.Parallel()
			newWindow := 3 * mixedWindow
			if old.shorter {
				newWindow = mixedWindow / 3
			}
			rdb := redisserver.Client(t)
			if old.acl {
				rdb = withoutPTTL(t)
			}
			demands := [2]float64{50, 300}
			if old.under {
				demands = [2]float64{5, 30}
			}
			mixedFleet(t, rdb, redis.NewScript(old.common+old.acquire), redis.NewScript(old.common+old.release), old.reply, newWindow, demands)
		})
	}
}

// withoutPTTL returns a client of a redis-server of its own, logged in as
// a user whose ACL allows every command but PTTL: one written for the
// commands of v10's scripts.
func withoutPTTL(t *testing.T) *redis.Client {
	t.Helper()
	srv := redisserver.StartServer(t)
	admin := srv.Client()
	defer admin.Close()
	const user, pass = "limiter", "limiter-pass"
	if err := admin.Do(context.Background(), "ACL", "SETUSER", user, "on", ">"+pass, "~*", "+@all", "-pttl").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pass})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// mixedWindow is the old clients' registry window in mixedFleet.
const mixedWindow = 300 * time.Millisecond

// mixedFleet runs on rdb old clients (their acquire and release scripts, whose
// acquire replies with reply elements, or with one string when reply is
// 0, as its release then does) and this release's, whose registry window
// is newWindow, on one tenant, each call reporting a demand drawn from
// [demands[0], demands[1]); see TestMixedFleetRollout.
func mixedFleet(t *testing.T, rdb *redis.Client, old, oldRelease *redis.Script, reply int, newWindow time.Duration, demands [2]float64) {
	ctx := context.Background()
	prefix := redisserver.Prefix(t)
	const (
		tenant = "rollout"
		window = mixedWindow
		olds   = 3
		news   = 3
		run    = 1200 * time.Millisecond
	)
	lim := Limits{Rate: 200, Burst: 50}

	var (
		mu           sync.Mutex
		granted      int64
		credited     float64
		reservations []Grant // the new clients' grants with a reservation
		first, last  int64   // Redis times of the first call and of the end, µs
		seenByOld    int64   // most instances an old client was told of
		seenByNew    int64
		calls        [2]int
		failures     []error
		recordServer = func(at int64) {
			if first == 0 || at < first {
				first = at
			}
			last = max(last, at)
		}
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	key := Key(prefix, tenant)
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for i := range olds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for time.Now().Before(deadline) {
				want := 1 + rng.IntN(8)
				demand := demands[0] + rng.Float64()*(demands[1]-demands[0])
				res, err := old.Run(ctx, rdb, []string{key, InstancesKey(key), QuotaKey(key)},
					formatRate(lim.Rate), lim.Burst, want, fmt.Sprintf("old-%d", i), window.Milliseconds(), demand).Result()
				var g, at, n int64
				if v, ok := res.([]interface{}); reply > 0 && ok && len(v) == reply {
					g, _ = v[0].(int64)
					at, _ = v[2].(int64)
					n, _ = v[3].(int64)
				} else if gr, perr := ParseAcquireReply(res, math.MaxInt64); reply == 0 && err == nil && perr == nil {
					g, at, n = gr.Granted, gr.ServerTime.UnixMicro(), int64(gr.Instances)
				} else {
					fail(fmt.Errorf("old client: %v, %v", res, err))
					return
				}
				mu.Lock()
				granted += g
				recordServer(at)
				seenByOld = max(seenByOld, n)
				calls[0]++
				mu.Unlock()
				if back := g / 2; back > 0 && rng.IntN(3) == 0 {
					res, err := oldRelease.Run(ctx, rdb, []string{key, ReleasesKey(key), QuotaKey(key)},
						formatRate(lim.Rate), lim.Burst, back, 0, uint32(at)).Result()
					var c float64
					var rat int64
					if r, ok := res.([]interface{}); reply > 0 && ok && len(r) == 3 {
						if c, err = strconv.ParseFloat(fmt.Sprint(r[2]), 64); err != nil {
							fail(err)
							return
						}
						rat, _ = r[1].(int64)
					} else if rr, perr := ParseReleaseReply(res, back); reply == 0 && err == nil && perr == nil {
						c, rat = rr.Credited, rr.ServerTime.UnixMicro()
					} else {
						fail(fmt.Errorf("old release: %v, %v", res, err))
						return
					}
					mu.Lock()
					credited += c
					recordServer(rat)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range news {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := NewClient(rdb, prefix, WithInstance(fmt.Sprintf("new-%d", i), newWindow), WithBatch(3))
			if err != nil {
				fail(err)
				return
			}
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for time.Now().Before(deadline) {
				want := int64(1 + rng.IntN(8))
				demand := demands[0] + rng.Float64()*(demands[1]-demands[0])
				reqs := []Request{
					{Tenant: tenant, Limits: lim, Want: want, Demand: demand, Reserve: time.Second},
					{Tenant: "other", Limits: lim, Want: 1},
					{Tenant: tenant, Limits: lim, Want: want, Demand: demand, Reserve: time.Second},
				}
				res, err := c.AcquireMany(ctx, reqs, nil)
				if err != nil || res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
					fail(fmt.Errorf("new client: %v, %+v", err, res))
					return
				}
				g := res[0].Grant
				mu.Lock()
				for _, gr := range []Grant{g, res[2].Grant} {
					granted += gr.Immediate()
					if gr.Reserved > 0 {
						reservations = append(reservations, gr)
					}
					recordServer(gr.ServerTime.Add(-gr.Wait).UnixMicro())
				}
				seenByNew = max(seenByNew, int64(g.Instances))
				calls[1]++
				mu.Unlock()
				// Give some back, named by its grant, as a syncer does
				// with tokens it did not spend (immediate ones: see the
				// known issue in release.lua).
				if back := g.Immediate() / 2; back > 0 && rng.IntN(3) == 0 {
					rr := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: tenant, Limits: lim, Amount: back, Age: 0, Grant: g.ID()}})
					if rr[0].Err != nil {
						fail(rr[0].Err)
						return
					}
					mu.Lock()
					credited += rr[0].Return.Credited
					recordServer(rr[0].Return.ServerTime.UnixMicro())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range failures {
		t.Fatal(err)
	}
	// The end: Redis's clock now, after every call. The calls' bucket
	// times can be ahead of it (a frozen bucket), so they do not count.
	end, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	last = end.UnixMicro()
	// Reserved token k is spendable from ServerTime + k/Pace (Redis
	// time): those spendable by the end count.
	reserved, spendable := int64(0), int64(0)
	for _, g := range reservations {
		reserved += g.Reserved
		for k := int64(1); k <= g.Reserved; k++ {
			if float64(g.ServerTime.UnixMicro())+float64(k)/g.Pace*1e6 <= float64(last) {
				spendable++
			}
		}
	}
	granted += spendable
	t.Logf("%d reservations, %d tokens reserved, %d of them spendable by the end", len(reservations), reserved, spendable)
	elapsed := float64(last-first) / 1e6
	bound := float64(lim.Burst) + lim.Rate*elapsed
	net := float64(granted) - credited
	t.Logf("%d old and %d new calls over %.3fs of Redis time: granted %d, credited %.2f, bound %.2f; instances seen by old %d, by new %d",
		calls[0], calls[1], elapsed, granted, credited, bound, seenByOld, seenByNew)
	if net > bound+1e-6 {
		t.Fatalf("granted %d less credited %.2f = %.2f, over the bound %.2f", granted, credited, net, bound)
	}
	if calls[0] == 0 || calls[1] == 0 {
		t.Fatalf("calls: %d old, %d new; want both sides to have run", calls[0], calls[1])
	}
	// Both sides count every instance: the old script reads this
	// release's entries, and this release's summary reads the old ones.
	if seenByOld != olds+news || seenByNew != olds+news {
		t.Fatalf("instances seen: %d by the old clients, %d by the new; want %d each", seenByOld, seenByNew, olds+news)
	}
}

// The quota script of v2 (main at c21efec), before the override stored
// its tenant's name (field n); v2Common is above.
//
//go:embed testdata/v2/quota.lua
var v2Quota string

// TestMixedFleetListOverrides stores overrides with clients of the
// previous release and of this one, as during a rolling upgrade, and
// lists them: an old override of a short tenant is listed by the name its
// key gives back; one of a hashed (long) tenant, without a name, is
// listed with its key and an error wrapping ErrNameUnknown, and listing
// goes on; an old client's set over a new override drops the name the
// same way; and an old client's acquire reads a new override as before.
func TestMixedFleetListOverrides(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	c, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	oldQuota := redis.NewScript(v2Common + v2Quota)
	base := Limits{Rate: 10, Burst: 10}
	oldSet := func(tenant string, o Override) {
		t.Helper()
		key := Key(prefix, tenant)
		err := oldQuota.Run(ctx, rdb, []string{key, QuotaKey(key)}, "set", formatRate(base.Rate), base.Burst,
			formatRate(o.Rate), o.Burst, o.MinLease, o.MaxLease, int64(o.LeaseTTL), o.Mode).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("x", 200)
	oldShort := Override{Rate: 1, Burst: 2}
	oldLong := Override{Rate: 3, Burst: 4, MinLease: 1, MaxLease: 2, LeaseTTL: time.Second, Mode: 1}
	newLong := Override{Rate: 5, Burst: 6}
	overwritten := Override{Rate: 7, Burst: 8}
	oldSet("old short", oldShort)
	oldSet(long+"old", oldLong)
	if _, err := c.SetOverride(ctx, long+"new", base, newLong); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetOverride(ctx, long+"overwritten", base, newLong); err != nil {
		t.Fatal(err)
	}
	oldSet(long+"overwritten", overwritten)

	named := map[string]Override{}
	unnamed := map[string]Override{}
	for lo, err := range c.ListOverrides(ctx) {
		switch {
		case errors.Is(err, ErrNameUnknown):
			if lo.Tenant != "" {
				t.Errorf("an unnamed override listed with tenant %q", lo.Tenant)
			}
			unnamed[lo.Key] = lo.Override
		case err != nil:
			t.Fatal(err)
		default:
			named[lo.Tenant] = lo.Override
		}
	}
	wantNamed := map[string]Override{"old short": oldShort, long + "new": newLong}
	wantUnnamed := map[string]Override{
		QuotaKey(Key(prefix, long+"old")):         oldLong,
		QuotaKey(Key(prefix, long+"overwritten")): overwritten,
	}
	if !maps.Equal(named, wantNamed) || !maps.Equal(unnamed, wantUnnamed) {
		t.Fatalf("listed by name %v and by key %v; want %v and %v", named, unnamed, wantNamed, wantUnnamed)
	}

	// The old acquire script reads an override with a name as before.
	oldAcquire := redis.NewScript(v1Common + v1Acquire)
	key := Key(prefix, long+"new")
	v, err := oldAcquire.Run(ctx, rdb, []string{key, InstancesKey(key), QuotaKey(key)},
		formatRate(base.Rate), base.Burst, 1, "old", 1000, 1).Slice()
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseOverride(v[4])
	if err != nil || o == nil || *o != newLong {
		t.Fatalf("the old acquire read the override as %+v, %v; want %+v", o, err, newLong)
	}
	// Setting it again from this release names it.
	if _, err := c.SetOverride(ctx, long+"old", base, oldLong); err != nil {
		t.Fatal(err)
	}
	for lo, err := range c.ListOverrides(ctx) {
		if err != nil && lo.Key == QuotaKey(Key(prefix, long+"old")) {
			t.Fatalf("after a new client set it again: %+v, %v", lo, err)
		}
	}
}

// TestOldClientKeepsFrozenBucket: a client of the previous release (the
// v2 scripts) writing a bucket that a reservation froze keeps ts, and
// keeps the key until the bucket would be full again as long as ts is at
// most a second after the clock: its TTL is (burst - tokens)/rate + 1 s
// from the clock, and the bucket is full at ts + (burst - tk)/rate. With
// ts twice ReserveAhead ahead the key would go about a second early, and a
// missing key is a full bucket: burst tokens a second before they exist.
// Hence ReserveAhead, whatever the length of a reservation. It is 10 ms
// short of the second: Redis keeps the expiry in whole milliseconds from
// the millisecond the old client's call ran in, so with ts a full second
// ahead the key could go up to a millisecond early (this test failed so
// on a loaded machine when ReserveAhead was 1 s). The expiry is read as
// Redis keeps it (PEXPIRETIME), not as a TTL counted from a clock read
// before it.
func TestOldClientKeepsFrozenBucket(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	old := redis.NewScript(v2Common + v2Acquire)
	// A rate at which the room up to ReserveAhead holds hundreds of
	// tokens, so that a reservation freezes the bucket to within a few
	// milliseconds of clock + ReserveAhead: the edge a mixed fleet relies on.
	lim := Limits{Rate: 1000, Burst: 1000}
	for _, tc := range []struct {
		horizon time.Duration // how far ahead of the clock the bucket is frozen
		alive   bool
	}{{ReserveAhead, true}, {2 * ReserveAhead, false}} {
		tenant := fmt.Sprint("frozen-", tc.horizon.Milliseconds())
		key := Key(prefix, tenant)
		c, err := NewClient(rdb, prefix, WithInstance("new", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Want: lim.Burst, Demand: lim.Rate})
		if tc.horizon == ReserveAhead {
			// The most a reservation commits: alone (its share the
			// rate), 10 s of it, capped by the room up to ReserveAhead.
			g := acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Want: 100 * lim.Burst, Demand: lim.Rate, Reserve: 10 * time.Second})
			if want := int64(0.98 * lim.Rate * ReserveAhead.Seconds()); g.Reserved < want {
				t.Fatalf("reservation %+v, want at least %d tokens", g, want)
			}
		} else {
			// What a longer ReserveAhead would leave.
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, key, "tk", "0", "ts", now.Add(tc.horizon).UnixMicro()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		ts, _ := rdb.HGet(ctx, key, "ts").Int64()
		// The old client reads and writes the bucket (want 0).
		if err := old.Run(ctx, rdb, []string{key, InstancesKey(key), QuotaKey(key)}, formatRate(lim.Rate), lim.Burst, 0).Err(); err != nil {
			t.Fatal(err)
		}
		ts2, _ := rdb.HGet(ctx, key, "ts").Int64()
		tk, _ := rdb.HGet(ctx, key, "tk").Float64()
		if ts2 != ts+1 {
			t.Fatalf("H %v: the old client moved ts from %d to %d, want it kept (a µs later)", tc.horizon, ts, ts2)
		}
		before, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		at, err := rdb.Do(ctx, "PEXPIRETIME", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if at < 0 {
			t.Fatalf("H %v: PEXPIRETIME %d: the key has no expiry", tc.horizon, at)
		}
		// The key lives until at (unix ms); the bucket is full at ts2 +
		// (burst - tk)/rate.
		expires := float64(at) * 1000
		full := float64(ts2) + (float64(lim.Burst)-tk)/lim.Rate*1e6
		t.Logf("H %v: key lives %.3f ms past the time the bucket is full (ts %.0f ms ahead)", tc.horizon, (expires-full)/1000, float64(ts2-before.UnixMicro())/1000)
		if alive := expires >= full; alive != tc.alive {
			t.Errorf("H %v: the old client's TTL keeps the key until %.0f, the bucket is full at %.0f; want kept: %v", tc.horizon, expires, full, tc.alive)
		}
	}
}

// TestRolloutCreditsNoMoreThanExact runs one random sequence of acquires
// and returns (each naming its grant) on two buckets: on one every call is
// this release's, on the other each call is this release's or v4's at
// random, as in a rolling upgrade (v4 keeps the level history as hb and
// p1..p8, exact; this release packs it in h, levels rounded up). Beside
// each bucket runs the exact rule: a level history fed with every call's
// level before its debit, never merged nor rounded, and raised by every
// credit the bucket gave. Every return must be credited at most what the
// exact rule gives on that bucket, so that the bound holds whichever
// release wrote the history last; and the crossings must be as
// common.lua says: a v4 call after this release's finds no history (the
// fields hb and p1..p8 are gone) and credits nothing granted before it;
// this release's call after v4's reads v4's fields (and deletes them), so
// that returns of grants since v4 restarted its history are credited.
// The buckets refill 1,000 tokens a second (about a tenth of a token
// between calls: levels with fractions, which this release rounds up),
// and returning every open grant, the latest first, brings a bucket back
// to full now and then, so that acquires take acquire.lua's full-bucket
// way (history_at): 49 to 70 times in a run. (At 300 a second, a run
// fast enough took it 3 or 4 times and failed.)
func TestRolloutCreditsNoMoreThanExact(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	newAcquire, newRelease := redis.NewScript(commonSource+acquireSource), redis.NewScript(commonSource+releaseSource)
	oldAcquire, oldRelease := redis.NewScript(v4Common+v4Acquire), redis.NewScript(v4Common+v4Release)
	const rate, burst = "1000", 100
	type bucket struct {
		key      string
		mixed    bool           // calls of v4 at random, else this release's only
		exact    peaks.Unmerged // the exact rule's history of this bucket
		started  bool
		lastOld  bool     // the last call that wrote the bucket was v4's
		grants   []*grant // open grants, oldest first
		credited [2]float64
		// credits by v4 of grants made before a call of this release
		// that followed (must be 0), and by this release of grants made
		// after v4 started its history (read from v4's fields)
		crossOld, crossNew, crossNewCredited int
	}
	type side struct{ acquire, release *redis.Script }
	sides := [2]side{{newAcquire, newRelease}, {oldAcquire, oldRelease}}
	rng := rand.New(rand.NewPCG(3, 5))
	// fields checks the layout the last call left: this release's h alone,
	// or v4's hb and p1 (h may be left by an earlier call of this release).
	fields := func(b *bucket) {
		t.Helper()
		m, err := rdb.HGetAll(ctx, b.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, h := m["h"]
		_, hb := m["hb"]
		_, p1 := m["p1"]
		if b.lastOld && !(hb && p1) || !b.lastOld && (!h || hb || p1) {
			t.Fatalf("%s: fields %v after a call of v4: %v", b.key, slices.Sorted(maps.Keys(m)), b.lastOld)
		}
	}
	acquire := func(b *bucket, old bool, want int64) {
		t.Helper()
		s := sides[0]
		if old {
			s = sides[1]
		}
		v, err := s.acquire.Run(ctx, rdb, []string{b.key, InstancesKey(b.key), QuotaKey(b.key)}, rate, burst, want).Result()
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		granted, left, now, _ := acquireReply(t, v)
		if !b.started {
			b.exact.Reset(now, burst)
			b.started = true
		}
		b.exact.Push(now, left+float64(granted))
		b.lastOld = old
		b.grants = append(b.grants, &grant{at: now, left: granted})
		fields(b)
	}
	release := func(b *bucket, old bool, i int, amount int64) {
		t.Helper()
		s := sides[0]
		if old {
			s = sides[1]
		}
		g := b.grants[i]
		v, err := s.release.Run(ctx, rdb, []string{b.key, ReleasesKey(b.key), QuotaKey(b.key)}, rate, burst, amount, 0, uint32(g.at)).Result()
		if err != nil {
			t.Fatalf("release: %v", err)
		}
		tokens, credit := releaseReply(t, v, amount)
		x := tokens - credit // the level before the credit
		exact := min(float64(amount), max(burst-b.exact.Peak(g.at, x), 0))
		if credit > exact+1e-9 {
			t.Fatalf("%s: a return of %d granted at %d by %s: credited %v, the exact rule %v", b.key, amount, g.at, map[bool]string{true: "v4", false: "this release"}[old], credit, exact)
		}
		if old && !b.lastOld && credit != 0 {
			t.Fatalf("%s: v4 credited %v after a call of this release: want 0 (no history)", b.key, credit)
		}
		switch {
		case old && !b.lastOld:
			b.crossOld++
		case !old && b.lastOld:
			b.crossNew++
			if credit > 0 {
				b.crossNewCredited++
			}
		}
		b.exact.Raise(g.at, credit)
		k := 0
		if old {
			k = 1
		}
		b.credited[k] += credit
		b.lastOld = old
		g.left -= amount
		fields(b)
	}
	buckets := []*bucket{{key: Key(prefix, "new")}, {key: Key(prefix, "mixed"), mixed: true}}
	full := 0
	for step := 0; step < 600; step++ {
		r := rng.IntN(10)
		want := int64(rng.IntN(20))
		pick := rng.IntN(1 << 20)
		amount := rng.Int64()
		for _, b := range buckets {
			old := b.mixed && rng.IntN(2) == 0
			switch {
			case len(b.grants) == 0 || r < 5:
				before := len(b.grants)
				acquire(b, old, want)
				if g := b.grants[before]; g.left > 0 {
					if v, _ := rdb.HGet(ctx, b.key, "tk").Float64(); v+float64(g.left) >= burst-1e-9 {
						full++
					}
				}
			case r < 8:
				if i := pick % len(b.grants); b.grants[i].left > 0 {
					release(b, old, i, 1+amount%b.grants[i].left)
				}
			default:
				for i := len(b.grants) - 1; i >= 0; i-- {
					if b.grants[i].left > 0 {
						release(b, b.mixed && rng.IntN(2) == 0, i, b.grants[i].left)
					}
				}
			}
		}
	}
	for _, b := range buckets {
		t.Logf("%s: credited %.0f by this release, %.0f by v4; v4 after this release %d times, this release after v4 %d times (%d credited)",
			b.key, b.credited[0], b.credited[1], b.crossOld, b.crossNew, b.crossNewCredited)
		if b.credited[0] == 0 {
			t.Errorf("%s: this release credited nothing: the case does not test the rule", b.key)
		}
	}
	m := buckets[1]
	if m.credited[1] == 0 || m.crossOld == 0 || m.crossNewCredited == 0 {
		t.Errorf("mixed: want v4 to credit, v4 to follow this release, and this release to credit from v4's history")
	}
	t.Logf("%d acquires found their bucket full", full)
	if full < 10 {
		t.Fatalf("%d acquires found their bucket full: want the full-bucket way taken", full)
	}
}

// grant is an open grant of TestRolloutCreditsNoMoreThanExact: its
// bucket time (the grant's ID) and the tokens not yet returned.
type grant struct{ at, left int64 }

// TestV6BesideShareAwareClients: the first release that honours rate
// shares beside v6, the last that does not, on one tenant. v6 reads this
// release's registry entries (four fields) as the other instances' and
// counts them; finding its own entry so (after a downgrade), it takes
// itself for a new instance once and writes its entry again, as three
// fields. This release reads v6's three-field entries. A record of shares
// (sh, which no release writes yet) is left as it is by v6, which refills
// past it: what the rollout's order must rule out before shares are
// granted (docs/design.md, "Rate shares"), shown here as it is.
func TestV6BesideShareAwareClients(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	old := redis.NewScript(v6Common + v6Acquire)
	const tenant = "mixed"
	key := Key(prefix, tenant)
	ikey := InstancesKey(key)
	lim := Limits{Rate: 100, Burst: 100}
	const window = time.Minute
	oldAcquire := func(id string, want int64) []any {
		t.Helper()
		r, err := old.Run(ctx, rdb, []string{key, ikey, QuotaKey(key)}, formatRate(lim.Rate), lim.Burst, want, id, window.Milliseconds(), 10).Slice()
		if err != nil {
			t.Fatalf("v6 acquire as %q: %v", id, err)
		}
		return r
	}
	entry := func(id string) string {
		t.Helper()
		v, err := rdb.HGet(ctx, ikey, id).Result()
		if err != nil {
			t.Fatalf("entry of %q: %v", id, err)
		}
		return v
	}
	a, err := NewClient(rdb, prefix, WithInstance("a", window))
	if err != nil {
		t.Fatal(err)
	}
	g := acquireOne(t, a, Request{Tenant: tenant, Limits: lim, Want: 10, Demand: 10})
	if f := strings.Split(entry("a"), ":"); len(f) != 4 || f[3] != "" {
		t.Fatalf("this release's entry %q, want four fields, the share empty", entry("a"))
	}
	// v6 as another instance counts a, and writes three fields.
	if r := oldAcquire("b", 10); r[3] != int64(2) {
		t.Fatalf("v6 as b counted %v instances, want 2 (a's four-field entry read)", r[3])
	}
	if f := strings.Split(entry("b"), ":"); len(f) != 3 {
		t.Fatalf("v6's entry %q, want three fields", entry("b"))
	}
	// This release reads b's entry (the registry summary, recomputed by a
	// new instance, counts it).
	c, err := NewClient(rdb, prefix, WithInstance("c", window))
	if err != nil {
		t.Fatal(err)
	}
	if g2 := acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10}); g2.Instances != 3 {
		t.Fatalf("this release as c counted %d instances, want 3", g2.Instances)
	}
	// A downgrade: v6 as a, whose entry has four fields.
	if r := oldAcquire("a", 1); r[3] != int64(3) {
		t.Fatalf("v6 as a after a downgrade counted %v instances, want 3", r[3])
	}
	if f := strings.Split(entry("a"), ":"); len(f) != 3 {
		t.Fatalf("v6 as a rewrote its entry as %q, want three fields", entry("a"))
	}
	// A record of shares: v6 keeps it as it is and refills at the whole
	// rate; this release then refills from v6's write at the rate less it.
	now := g.ServerTime.UnixMicro()
	sh := Shares{Epoch: now / 60_000_000, Committed: 50, Period: 60_000_000}
	if err := rdb.HSet(ctx, key, "sh", sh.String()).Err(); err != nil {
		t.Fatal(err)
	}
	oldAcquire("b", lim.Burst) // drained: what refills next shows the rate
	if v, _ := rdb.HGet(ctx, key, "sh").Result(); v != sh.String() {
		t.Fatalf("v6 left sh %q, want %q as it was", v, sh.String())
	}
	tk, _ := rdb.HGet(ctx, key, "tk").Float64()
	ts, _ := rdb.HGet(ctx, key, "ts").Int64()
	g3 := acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Want: 0, Demand: 10})
	if want, _ := RefillShares(tk, ts, g3.ServerTime.UnixMicro(), lim.Rate, lim.Burst, sh); g3.Tokens != want || want >= float64(lim.Burst) {
		t.Fatalf("after v6: %v tokens, RefillShares from v6's write says %v (below the burst)", g3.Tokens, want)
	}
}

// acquireReply reads the granted tokens, the tokens left, the bucket's
// time and the instances from an acquire's reply: this release's string
// (ParseAcquireReply), or the array of an earlier release's script.
func acquireReply(t *testing.T, v interface{}) (granted int64, left float64, now, instances int64) {
	t.Helper()
	if _, ok := v.(string); ok {
		g, err := ParseAcquireReply(v, math.MaxInt64)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		return g.Granted, g.Tokens, g.ServerTime.UnixMicro(), int64(g.Instances)
	}
	a, ok := v.([]interface{})
	if !ok || len(a) < 4 {
		t.Fatalf("acquire: %T %v, want an earlier release's array", v, v)
	}
	granted, _ = a[0].(int64)
	now, _ = a[2].(int64)
	instances, _ = a[3].(int64)
	left, err := strconv.ParseFloat(fmt.Sprint(a[1]), 64)
	if err != nil {
		t.Fatalf("acquire: tokens: %v", err)
	}
	return granted, left, now, instances
}

// releaseReply reads the tokens now and the tokens credited from a
// release's reply of amount tokens: this release's string (parseRelease),
// or the array of an earlier release's script.
func releaseReply(t *testing.T, v interface{}, amount int64) (tokens, credited float64) {
	t.Helper()
	if _, ok := v.(string); ok {
		r, err := ParseReleaseReply(v, amount)
		if err != nil {
			t.Fatalf("release: %v", err)
		}
		return r.Tokens, r.Credited
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 3 {
		t.Fatalf("release: %T %v, want an earlier release's array", v, v)
	}
	num := func(x interface{}) float64 {
		f, err := strconv.ParseFloat(fmt.Sprint(x), 64)
		if err != nil {
			t.Fatalf("release: %v", err)
		}
		return f
	}
	return num(a[0]), num(a[2])
}

// TestRolloutAgedReleaseCreditsNoMoreThanV10: this release's release.lua
// counts a return's age back from Redis's clock, v10's from the bucket's
// time, which runs ahead of the clock while its refill is reserved. On
// buckets made alike by random acquires, reservations among them, each
// release of a random amount and age (naming its grant or not) is run on
// a copy of the bucket with v10's script and on the bucket with this
// release's, in one MULTI, so both see the same state within microseconds
// of each other: this release's credit is never more than v10's (beyond
// the refill of a millisecond), so clients of both releases on one bucket
// keep the bound, and some credits are less (an aged return into a frozen
// bucket, which v10 credited more than the exact rule).
func TestRolloutAgedReleaseCreditsNoMoreThanV10(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	c, err := NewClient(rdb, prefix, WithInstance("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	v10 := redis.NewScript(commonSource + v10Release)
	// Both run by their digests in the MULTI below, where a NOSCRIPT
	// cannot fall back to EVAL.
	for _, src := range []string{commonSource + v10Release, releaseScript.src} {
		if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lim := Limits{Rate: 1000, Burst: 50}
	tolerance := lim.Rate * 1e-3
	rng := rand.New(rand.NewPCG(10, 1))
	var less, releases int
	for round := range 60 {
		tenant := fmt.Sprintf("t%d", round)
		key := Key(prefix, tenant)
		var grants []Grant
		for range 1 + rng.IntN(4) {
			req := Request{Tenant: tenant, Limits: lim, Want: 1 + int64(rng.IntN(60)), Demand: 500}
			if rng.IntN(2) == 0 {
				req.Reserve = time.Duration(100+rng.IntN(900)) * time.Millisecond
			}
			res, err := c.AcquireMany(ctx, []Request{req}, nil)
			if err != nil || res[0].Err != nil {
				t.Fatalf("acquire: %v, %v", err, res[0].Err)
			}
			if res[0].Grant.Granted > 0 {
				grants = append(grants, res[0].Grant)
			}
		}
		if len(grants) == 0 {
			continue
		}
		g := grants[rng.IntN(len(grants))]
		amount := 1 + int64(rng.IntN(int(max(g.Immediate(), 1))))
		age := time.Since(g.ServerTime.Add(-g.Wait)) + time.Duration(rng.IntN(50))*time.Millisecond
		if age < 0 {
			age = 0
		}
		grant := GrantID(0)
		if rng.IntN(3) == 0 {
			grant = g.ID()
		}
		cl := plain.releaseCall(ReleaseRequest{Tenant: tenant, Limits: lim, Amount: amount, Age: age, Grant: grant})
		cp := key + ":copy"
		dump, err := rdb.Dump(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.RestoreReplace(ctx, cp, 0, dump).Err(); err != nil {
			t.Fatal(err)
		}
		var oldCmd, newCmd *redis.Cmd
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			oldCmd = v10.EvalSha(ctx, p, []string{cp, cl.keys[1] + ":copy", cl.keys[2]}, cl.argv()...)
			newCmd = releaseScript.run(ctx, p, cl.keys, cl.argv()...)
			return nil
		}); err != nil {
			t.Fatalf("release: %v", err)
		}
		oldRet, err := parseRelease(oldCmd, amount)
		if err != nil {
			t.Fatalf("v10's release: %v", err)
		}
		newRet, err := parseRelease(newCmd, amount)
		if err != nil {
			t.Fatalf("this release's release: %v", err)
		}
		releases++
		if newRet.Credited > oldRet.Credited+tolerance {
			t.Fatalf("round %d: a release of %d tokens aged %v (grant %d) credited %v, v10's %v: more", round, amount, age, grant, newRet.Credited, oldRet.Credited)
		}
		if newRet.Credited < oldRet.Credited-tolerance {
			less++
		}
	}
	t.Logf("%d releases, %d credited less than v10's", releases, less)
	if less == 0 {
		t.Errorf("no release of %d credited less than v10's: the test made no aged return into a frozen bucket", releases)
	}
}

// TestRegistryTTLBesideV10: instances of different registry windows, of
// v10 and of this release, on one tenant. This release's acquire only
// ever extends the registry's TTL, so a short window's recompute keeps
// v10's long-window entries (v10 cut the TTL to its caller's two windows,
// and the hash expired under them: their next call counted itself alone,
// as a new instance with its credit full). v10's short-window clients
// still cut it, as they did beside each other (shown as it is: the hash
// then lives as long as their last renewal says, and this release's
// long-window instance comes back as a new one): fairness moves, not the
// bound, which the test checks over every call of both, returns of both
// included, each credited no more than it gave back.
func TestRegistryTTLBesideV10(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	oldAcquire, oldRelease := redis.NewScript(v10Common+v10Acquire), redis.NewScript(v10Common+v10Release)
	const long, short = 10 * time.Second, 50 * time.Millisecond
	lim := Limits{Rate: 100, Burst: 100}
	var granted, credited float64
	var first time.Time
	type call struct {
		granted   int64
		at        time.Time // Redis's clock at the call
		instances int
	}
	see := func(c call) call {
		granted += float64(c.granted)
		if first.IsZero() {
			first = c.at
		}
		return c
	}
	give := func(amount int64, credit float64) {
		t.Helper()
		if credit < 0 || credit > float64(amount) {
			t.Fatalf("a return of %d credited %v", amount, credit)
		}
		credited += credit
	}
	v10 := func(tenant, id string, window time.Duration) call {
		t.Helper()
		key := Key(prefix, tenant)
		v, err := oldAcquire.Run(ctx, rdb, []string{key, InstancesKey(key), QuotaKey(key)},
			formatRate(lim.Rate), lim.Burst, 4, id, window.Milliseconds(), 50).Result()
		if err != nil {
			t.Fatalf("v10 acquire as %q: %v", id, err)
		}
		g, err := ParseAcquireReply(v, 4)
		if err != nil {
			t.Fatalf("v10 acquire as %q: %v", id, err)
		}
		if g.Granted > 1 {
			r, err := oldRelease.Run(ctx, rdb, []string{key, ReleasesKey(key), QuotaKey(key)},
				formatRate(lim.Rate), lim.Burst, 1, 0, uint32(g.ServerTime.UnixMicro())).Result()
			if err != nil {
				t.Fatalf("v10 release: %v", err)
			}
			ret, err := ParseReleaseReply(r, 1)
			if err != nil {
				t.Fatalf("v10 release: %v", err)
			}
			give(1, ret.Credited)
		}
		return see(call{g.Granted, g.ServerTime.Add(-g.Wait), g.Instances})
	}
	clients := map[string]*Client{}
	cur := func(tenant, id string, window time.Duration) call {
		t.Helper()
		c := clients[id]
		if c == nil {
			var err error
			if c, err = NewClient(rdb, prefix, WithInstance(id, window)); err != nil {
				t.Fatal(err)
			}
			clients[id] = c
		}
		g := acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Want: 4, Demand: 50})
		if g.Granted > 1 {
			rr := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: tenant, Limits: lim, Amount: 1, Grant: g.ID()}})
			if rr[0].Err != nil {
				t.Fatalf("release: %v", rr[0].Err)
			}
			give(1, rr[0].Return.Credited)
		}
		return see(call{g.Granted, g.ServerTime.Add(-g.Wait), g.Instances})
	}
	pttl := func(tenant string) time.Duration {
		t.Helper()
		d, err := rdb.PTTL(ctx, InstancesKey(Key(prefix, tenant))).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// pastShort polls Redis's clock until it is two short windows and a
	// little after at.
	pastShort := func(at time.Time) {
		t.Helper()
		until := at.Add(2*short + 5*time.Millisecond)
		deadline := time.Now().Add(5 * time.Second)
		for {
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if now.After(until) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Redis's clock at %v, not past %v after 5 s", now, until)
			}
			time.Sleep(5 * time.Millisecond) // between polls of Redis's clock
		}
	}

	// v10's long windows, this release's short one.
	v10("a", "old-long-1", long)
	v10("a", "old-long-2", long)
	c := cur("a", "new-short", short)
	if c.instances != 3 {
		t.Fatalf("this release's short window counted %d instances, want 3", c.instances)
	}
	if d := pttl("a"); d < long {
		t.Errorf("registry PTTL %v after this release's short-window recompute, want about %v (v10's long windows')", d, 2*long)
	}
	pastShort(c.at)
	if c := v10("a", "old-long-1", long); c.instances != 3 {
		t.Errorf("v10's long window after this release's short one: %d instances, want 3 (the registry holds %v)",
			c.instances, rdb.HKeys(ctx, InstancesKey(Key(prefix, "a"))).Val())
	}

	// This release's long windows, v10's short one: v10 cuts the TTL.
	cur("b", "new-long-1", long)
	cur("b", "new-long-2", long)
	c = v10("b", "old-short", short)
	if c.instances != 3 {
		t.Fatalf("v10's short window counted %d instances, want 3", c.instances)
	}
	if d := pttl("b"); d > 2*short {
		t.Errorf("registry PTTL %v after v10's short-window recompute: v10 set %v, want it shown as it is", d, 2*short)
	}
	pastShort(c.at)
	if c := cur("b", "new-long-1", long); c.instances != 1 {
		t.Errorf("this release's long window after v10's short one cut the registry: %d instances, want 1 (as a new instance)", c.instances)
	}
	if d := pttl("b"); d < 2*long-time.Second {
		t.Errorf("registry PTTL %v after this release's recompute, want about %v", d, 2*long)
	}

	end, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Two tenants, each within its own bound from the first call.
	bound := 2 * (float64(lim.Burst) + lim.Rate*end.Sub(first).Seconds())
	if net := granted - credited; net > bound {
		t.Fatalf("granted %v less credited %v = %v, over the two tenants' bound %v", granted, credited, net, bound)
	}
}

// TestRolloutNamedGrantNearTheWrapCreditsNoMoreThanV11: releases that name
// their grant, with ages near 2^32 µs, into buckets frozen up to
// ReserveAhead ahead of the clock or not, run by v11 and by this release
// on copies of one bucket in one MULTI: this release never credits more
// than v11 (a fleet of both keeps the bound whichever runs a release), and
// credits less where v11 took the grant for a time 2^32 µs after it.
func TestRolloutNamedGrantNearTheWrapCreditsNoMoreThanV11(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	v11 := redis.NewScript(v11Common + v11Release)
	for _, src := range []string{v11Common + v11Release, releaseScript.src} {
		if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	lim := Limits{Rate: 1e-9, Burst: 100}
	rng := rand.New(rand.NewPCG(11, 1))
	var less int
	for round := range 80 {
		tenant := fmt.Sprintf("t%d", round)
		key := Key(prefix, tenant)
		clock := redisNow(t, rdb)
		lead := int64(rng.IntN(2)) * int64(rng.IntN(int(ReserveAhead.Microseconds())))
		ageMS := int64(1<<32)/1000 - int64(rng.IntN(2000))
		// The grant, within the age (with 300 ms for the trip), and the
		// bucket full after it, then drained.
		grant := clock - ageMS*1000 + 300_000 + int64(rng.IntN(1000))
		ts := clock + lead
		full := grant + 1 + int64(rng.IntN(int(clock-1000-grant-1)))
		h := packed(ts, lim.Burst, at3(full, 100), at3(clock-1000, float64(1+rng.IntN(90))))
		cp := key + ":copy"
		for _, k := range []string{key, cp} {
			if err := rdb.HSet(ctx, k, "tk", "5", "ts", strconv.FormatInt(ts, 10), "h", h).Err(); err != nil {
				t.Fatal(err)
			}
		}
		amount := 1 + int64(rng.IntN(60))
		cl := plain.releaseCall(ReleaseRequest{Tenant: tenant, Limits: lim, Amount: amount,
			Age: time.Duration(ageMS) * time.Millisecond, Grant: GrantID(uint32(grant))})
		var oldCmd, newCmd *redis.Cmd
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			oldCmd = v11.EvalSha(ctx, p, []string{cp, cl.keys[1] + ":copy", cl.keys[2]}, cl.argv()...)
			newCmd = releaseScript.run(ctx, p, cl.keys, cl.argv()...)
			return nil
		}); err != nil {
			t.Fatalf("release: %v", err)
		}
		oldRet, err := parseRelease(oldCmd, amount)
		if err != nil {
			t.Fatalf("v11's release: %v", err)
		}
		newRet, err := parseRelease(newCmd, amount)
		if err != nil {
			t.Fatalf("this release's release: %v", err)
		}
		if newRet.Credited > oldRet.Credited {
			t.Fatalf("round %d: %d tokens aged %d ms into a bucket %d µs ahead: credited %v, v11's %v: more",
				round, amount, ageMS, lead, newRet.Credited, oldRet.Credited)
		}
		if newRet.Credited != 0 {
			t.Fatalf("round %d: %d tokens of a grant after which the bucket was full: credited %v, want 0", round, amount, newRet.Credited)
		}
		if newRet.Credited < oldRet.Credited {
			less++
		}
	}
	if less == 0 {
		t.Error("no release credited less than v11's: the test met no grant past the wrap")
	}
	t.Logf("%d of 80 releases credited less than v11's", less)
}

// TestRolloutCorruptRegistryBesideV11: this release repairs a corrupt
// registry (entries whose numbers are not finite or are negative, a
// summary of inf instances) where v11 used it as it was. Beside v11 on one
// tenant, with v11's own entry's credit nan (which v11 keeps writing
// back), this release's calls never fail, write only finite entries and
// drop the entry at time inf; and the bound holds over what both granted,
// less what both credited.
func TestRolloutCorruptRegistryBesideV11(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	oldAcquire, oldRelease := redis.NewScript(v11Common+v11Acquire), redis.NewScript(v11Common+v11Release)
	lim := Limits{Rate: 100, Burst: 50}
	key := Key(prefix, "t")
	ikey := InstancesKey(key)
	c, err := NewClient(rdb, prefix, WithInstance("new", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var granted, credited float64
	give := func(amount int64, credit float64) {
		t.Helper()
		if credit < 0 || credit > float64(amount) {
			t.Fatalf("a return of %d credited %v", amount, credit)
		}
		credited += credit
	}
	g := acquireOne(t, c, Request{Tenant: "t", Limits: lim, Want: 40, Demand: 500})
	granted += float64(g.Granted)
	corrupt := func() {
		t.Helper()
		now := strconv.FormatInt(g.ServerTime.UnixMicro(), 10)
		// An hour old, its share "in force" until inf: past any record
		// (there is none), so not in force.
		hour := strconv.FormatInt(g.ServerTime.UnixMicro()-int64(time.Hour/time.Microsecond), 10)
		if err := rdb.HSet(ctx, ikey, "old", now+":500:nan:", "new", now+":500:-100:", "ghost", "inf:500:5:",
			"shared", hour+":500:5:5/"+hour+"/inf").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, key, "rg", now+":inf:1500:33").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 30; i++ {
		if i%10 == 0 {
			corrupt()
		}
		g = acquireOne(t, c, Request{Tenant: "t", Limits: lim, Want: 8, Demand: 500})
		granted += float64(g.Granted)
		if g.Granted > 1 {
			rr := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 1, Grant: g.ID()}})
			if rr[0].Err != nil {
				t.Fatalf("release: %v", rr[0].Err)
			}
			give(1, rr[0].Return.Credited)
		}
		m, err := rdb.HGetAll(ctx, ikey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m["ghost"]; ok {
			t.Fatalf("call %d: the entry at time inf was kept: %v", i, m)
		}
		if _, ok := m["shared"]; ok {
			t.Fatalf("call %d: the hour-old entry whose share ran until inf was kept: %v", i, m)
		}
		for _, f := range strings.Split(m["new"], ":")[:3] {
			if x, err := strconv.ParseFloat(f, 64); err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				t.Fatalf("call %d: this release's entry %q", i, m["new"])
			}
		}
		granted += float64(oldCallAndReturn(t, rdb, oldAcquire, oldRelease, key, lim, 500, give))
	}
	end, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	bound := float64(lim.Burst) + lim.Rate*end.Sub(first).Seconds()
	if net := granted - credited; net > bound {
		t.Fatalf("granted %v less credited %v = %v, over the bound %v", granted, credited, net, bound)
	}
}

// TestRolloutCreditOverflowBesideV12: this release caps an instance's
// credit capacity at 2^53 tokens (MaxCredit) where v12 wrote what
// burst × share / rate gave, inf once a demand far above the rate made it
// overflow. Beside v12 on one tenant (Burst 1e9, Rate 1), both sides
// reporting a demand of 1e300 after this release's instance took a rate
// share, v12's entry made a credit of inf now and then (as v12 writes its
// own when it holds a share): every call of both succeeds, this release's entry stays finite
// and its calls keep reporting the share, and the bound holds over what
// both granted, less what both credited.
func TestRolloutCreditOverflowBesideV12(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	oldAcquire, oldRelease := redis.NewScript(v12Common+v12Acquire), redis.NewScript(v12Common+v12Release)
	lim := Limits{Rate: 1, Burst: 1_000_000_000}
	key := Key(prefix, "t")
	ikey := InstancesKey(key)
	c, err := NewClient(rdb, prefix, WithInstance("new", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var granted, credited float64
	give := func(amount int64, credit float64) {
		t.Helper()
		if credit < 0 || credit > float64(amount) {
			t.Fatalf("a return of %d credited %v", amount, credit)
		}
		credited += credit
	}
	terms := ShareTerms{Period: 10 * time.Second, Hold: 2 * time.Second}
	g := acquireOne(t, c, Request{Tenant: "t", Limits: lim, Want: 1, Demand: 0.5, Share: ShareAsk, ShareTerms: terms})
	granted += float64(g.Granted)
	if !g.RateShare.Held() {
		t.Fatalf("ask: %+v, want a share", g)
	}
	share := g.RateShare
	for i := 0; i < 20; i++ {
		if i%5 == 0 {
			// What v12 writes for an instance of its own holding a share
			// when its demand jumps so: a credit of inf.
			now := strconv.FormatInt(g.ServerTime.UnixMicro(), 10)
			if err := rdb.HSet(ctx, ikey, "old", now+":1e+300:inf:").Err(); err != nil {
				t.Fatal(err)
			}
		}
		g = acquireOne(t, c, Request{Tenant: "t", Limits: lim, Want: 8, Demand: 1e300})
		granted += float64(g.Granted)
		if g.RateShare != share {
			t.Fatalf("call %d: share %+v, want the share held, %+v", i, g.RateShare, share)
		}
		if g.Granted > 1 {
			rr := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 1, Grant: g.ID()}})
			if rr[0].Err != nil {
				t.Fatalf("release: %v", rr[0].Err)
			}
			give(1, rr[0].Return.Credited)
		}
		entry, err := rdb.HGet(ctx, ikey, "new").Result()
		if err != nil {
			t.Fatal(err)
		}
		if x, err := strconv.ParseFloat(strings.Split(entry, ":")[2], 64); err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > MaxCredit {
			t.Fatalf("call %d: this release's entry %q, want a credit in [0, 2^53]", i, entry)
		}
		granted += float64(oldCallAndReturn(t, rdb, oldAcquire, oldRelease, key, lim, 1e300, give))
	}
	end, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	bound := float64(lim.Burst) + lim.Rate*end.Sub(first).Seconds()
	if net := granted - credited; net > bound {
		t.Fatalf("granted %v less credited %v = %v, over the bound %v", granted, credited, net, bound)
	}
	t.Logf("granted %v, credited %v", granted, credited)
}

// oldCallAndReturn runs an earlier release's acquire (acquire, its
// common.lua included) for 8 tokens of key as instance "old", reporting
// demand, and when it grants more than one, returns one through that
// release's release script (release), its grant time the reply's; give
// is told of the return and what it credited. It returns the tokens
// granted.
func oldCallAndReturn(t *testing.T, rdb *redis.Client, acquire, release *redis.Script, key string, lim Limits, demand float64, give func(amount int64, credit float64)) int64 {
	t.Helper()
	ctx := context.Background()
	v, err := acquire.Run(ctx, rdb, []string{key, InstancesKey(key), QuotaKey(key)},
		formatRate(lim.Rate), lim.Burst, 8, "old", time.Minute.Milliseconds(), demand).Result()
	if err != nil {
		t.Fatalf("old acquire: %v", err)
	}
	g, err := ParseAcquireReply(v, 8)
	if err != nil {
		t.Fatalf("old acquire: %v", err)
	}
	if g.Granted > 1 {
		r, err := release.Run(ctx, rdb, []string{key, ReleasesKey(key), QuotaKey(key)},
			formatRate(lim.Rate), lim.Burst, 1, 0, uint32(g.ServerTime.UnixMicro())).Result()
		if err != nil {
			t.Fatalf("old release: %v", err)
		}
		ret, err := ParseReleaseReply(r, 1)
		if err != nil {
			t.Fatalf("old release: %v", err)
		}
		give(1, ret.Credited)
	}
	return g.Granted
}
