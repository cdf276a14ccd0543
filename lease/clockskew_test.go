package lease

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/rateshare"
	"github.com/leasequota/leasequota/internal/redisserver"
)

// A failover to a replica whose clock differs from the old master's by d
// cannot be made with a real Redis here (its clock cannot be stepped), but
// what the scripts then see can: the keys as the old master wrote them,
// every time in them d away from the new master's clock. shiftTimes makes
// that: it moves every time stored in a tenant's keys by delta (µs),
// as they read against a clock -delta away: the bucket's ts (its level
// history is stored relative to ts, and moves with it), the record of
// shares sh (its epochs' boundaries), the registry summary rg and ol,
// the registry entries' last acquire and their shares' from and until,
// the applied release ids' times, and each key's expiry (Redis keeps it
// as an absolute time, which a replica counts against its own clock).
// With a negative delta it is also time passing: everything happened
// -delta earlier.
func shiftTimes(t *testing.T, rdb *redis.Client, key string, delta int64) {
	t.Helper()
	ctx := context.Background()
	shift := func(s string) string {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("shift %q: %v", s, err)
		}
		return strconv.FormatInt(v+delta, 10)
	}
	b, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var set []any
	for f, v := range b {
		switch f {
		case "ts", "ol":
			set = append(set, f, shift(v))
		case "rg":
			p := strings.SplitN(v, ":", 2)
			set = append(set, f, shift(p[0])+":"+p[1])
		case "sh":
			sh, err := ParseShares(v)
			if err != nil {
				t.Fatal(err)
			}
			q := sh.Phase + delta
			ep := q / sh.Period
			if q%sh.Period < 0 {
				ep--
			}
			sh.Epoch += ep
			sh.Phase = q - ep*sh.Period
			set = append(set, f, sh.String())
		}
	}
	if len(set) > 0 {
		if err := rdb.HSet(ctx, key, set...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ikey := InstancesKey(key)
	entries, err := rdb.HGetAll(ctx, ikey).Result()
	if err != nil {
		t.Fatal(err)
	}
	set = set[:0]
	for id, v := range entries {
		p := strings.Split(v, ":")
		p[0] = shift(p[0])
		if len(p) == 4 && p[3] != "" {
			r := strings.Split(p[3], "/")
			r[1], r[2] = shift(r[1]), shift(r[2])
			p[3] = strings.Join(r, "/")
		}
		set = append(set, id, strings.Join(p, ":"))
	}
	if len(set) > 0 {
		if err := rdb.HSet(ctx, ikey, set...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rkey := ReleasesKey(key)
	ids, err := rdb.ZRangeWithScores(ctx, rkey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range ids {
		if err := rdb.ZAdd(ctx, rkey, redis.Z{Score: z.Score + float64(delta), Member: z.Member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{key, ikey, rkey} {
		at, err := rdb.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if at > 0 {
			if err := rdb.Do(ctx, "PEXPIREAT", k, at+delta/1000).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClockAheadShareOutlivesItsRecord: a failover to a replica whose
// clock is d ahead ends the bucket's record of the shares in force d
// early (its epochs are in Redis's clock), while each instance holding a
// share accrues it to the end its LocalWindow mapped when the share was
// granted, in its own clock. For the rest of the share (up to 1.5
// periods) the bucket refills at the whole rate and the share's tokens
// come due too: up to s*min(d, what was left of the share) tokens over
// the bound, besides the jump's refill. Not fixed (docs/failure-modes.md,
// "Clock jumps", says so and what would fix it); the test holds the
// breach to what the docs state, and the control tenant, whose clock
// does not jump, to the bound.
func TestClockAheadShareOutlivesItsRecord(t *testing.T) {
	ctx := context.Background()
	_, rdb, _ := setup(t)
	prefix := redisserver.Prefix(t)
	c, err := NewClient(rdb, prefix) // the rest of the fleet
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewClient(rdb, prefix, WithInstance("x", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 100, Burst: 10}
	const (
		period = 10 * time.Second
		hold   = time.Second
		d      = 20 * time.Second // the new master's clock ahead of the old one's
		step   = 100 * time.Millisecond
	)
	per := period.Microseconds()
	// The epoch began a second ago: the share is granted until its end, 9 s.
	phase := ((redisNow(t, rdb)-1_000_000)%per + per) % per
	terms := ShareTerms{Period: period, Phase: time.Duration(phase) * time.Microsecond, Hold: hold}
	for _, tenant := range []string{"ahead", "control"} {
		acquireOne(t, x, Request{Tenant: tenant, Limits: lim, Demand: 1000})
		sent := time.Now()
		g := acquireOne(t, x, Request{Tenant: tenant, Limits: lim, Demand: 1000, Share: ShareAsk, ShareTerms: terms})
		arrived := time.Now()
		rs := g.RateShare
		if !rs.Held() {
			t.Fatalf("%s: x got no share: %+v", tenant, g)
		}
		lf, lu := rateshare.LocalWindow(sent.UnixMicro(), arrived.UnixMicro(), g.ServerTime.Add(-g.Wait).UnixMicro(),
			rateshare.Share{Rate: rs.Rate, From: rs.From.UnixMicro(), Until: rs.Until.UnixMicro()}, 1e-3)
		key := Key(prefix, tenant)
		if _, err := c.Acquire(ctx, tenant, lim, 1000); err != nil { // the fleet takes what is there
			t.Fatal(err)
		}
		failover := time.Now().UnixMicro()
		if tenant == "ahead" {
			shiftTimes(t, rdb, key, -d.Microseconds())
		}
		// Right after the failover the fleet takes the bucket's refill
		// (the jump's), then the refill of step, time passing (emulated).
		jump, err := c.Acquire(ctx, tenant, lim, 1000)
		if err != nil {
			t.Fatal(err)
		}
		_, recErr := rdb.HGet(ctx, key, "sh").Result()
		shiftTimes(t, rdb, key, -step.Microseconds())
		g2, err := c.Acquire(ctx, tenant, lim, 1000)
		if err != nil {
			t.Fatal(err)
		}
		refill := float64(g2.Granted) / step.Seconds() // tokens/s the bucket makes beside the share
		if tenant == "control" {
			if refill > lim.Rate-rs.Rate+1/step.Seconds() {
				t.Fatalf("control: the bucket refilled at %v/s beside a share of %v/s", refill, rs.Rate)
			}
			continue
		}
		// Over the rest of x's share in x's clock, W, the fleet may take
		// the jump's tokens, the bucket's refill and x's share's.
		w := float64(lu-max(lf, failover)) / 1e6
		shared := math.Floor(rs.Rate * (1 - 1e-3) * w)
		admitted := float64(jump.Granted) + refill*w + shared
		allowed := float64(lim.Burst) + lim.Rate*(w+hold.Seconds()) + min(lim.Rate*d.Seconds(), float64(lim.Burst))
		// The breach failure-modes.md states: the share's rate over
		// min(d, what was left of it), on top of the bound.
		stated := allowed + rs.Rate*min(d.Seconds(), w)
		t.Logf("a failover to a clock %v ahead: %v tokens (jump %d, bucket %v, x's share %v) over %.2f s, where Burst + Rate*(W + Hold) + the jump's Burst allow %v and the docs state at most %v (the record of shares after the failover: %v; the bucket refilled at %v/s beside x's share of %v/s)",
			d, admitted, jump.Granted, refill*w, shared, w, allowed, stated, recErr, refill, rs.Rate)
		if admitted > stated {
			t.Errorf("a failover to a clock %v ahead: %v tokens over %.2f s, beyond the %v docs/failure-modes.md states", d, admitted, w, stated)
		}
	}
}

// TestUnnamedReturnAfterClockAhead: a release that names no grant (Grant
// 0: lease.Client.Release, a drain whose grant is unknown) is credited
// against the levels since Redis's clock less its age. On a clock d
// ahead of the one that wrote the bucket, that reaches back d less than
// the bucket's own time line: the levels recorded in the d before are
// left out of the peak, and the return is credited as if the bucket
// had not been near full then (the cap's loss given back). Here 60
// tokens are granted from a full bucket (rate 1/s, burst 100), the bucket
// refills to 90 over 50 s, another grant takes the 90, and the 60 come
// back; had they never been granted the bucket would have been full
// from then, so 10 of them are owed back; after a failover to a clock 60 s
// ahead the release credits 40. Not fixed (docs/failure-modes.md, "Clock
// jumps"): on the same clock the test holds the credit to what is owed,
// after the jump to what the docs state (owed plus at most a Burst, and
// never more than was returned).
func TestUnnamedReturnAfterClockAhead(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	lim := Limits{Rate: 1, Burst: 100}
	for _, tc := range []struct {
		tenant string
		ahead  time.Duration
	}{{"same-clock", 0}, {"clock-ahead", 60 * time.Second}} {
		key := c.Key(tc.tenant)
		sent := time.Now()
		a, err := c.Acquire(ctx, tc.tenant, lim, 60)
		if err != nil || a.Granted != 60 {
			t.Fatalf("%s: acquire: %+v %v", tc.tenant, a, err)
		}
		const passed = 50 * time.Second
		shiftTimes(t, rdb, key, -passed.Microseconds())
		b, err := c.Acquire(ctx, tc.tenant, lim, 1000)
		if err != nil || b.Granted != 90 {
			t.Fatalf("%s: second acquire: %+v %v", tc.tenant, b, err)
		}
		shiftTimes(t, rdb, key, -tc.ahead.Microseconds())
		age := passed + time.Since(sent) + time.Millisecond
		ret, err := c.Release(ctx, tc.tenant, lim, 60, age)
		if err != nil {
			t.Fatal(err)
		}
		// The bucket's own time line: at the release the level the 60
		// never granted would have left is at least the 90 seen 50 s
		// after them (the cap held it at 100 meanwhile): 10 owed.
		owed := 10.0 + 1
		limit := owed // on the same clock: the exact rule
		if tc.ahead > 0 {
			limit = min(owed+float64(lim.Burst), 60) // the breach the docs state
		}
		t.Logf("%s: the return of 60 tokens was credited %v (owed at most %v)", tc.tenant, ret.Credited, owed)
		if ret.Credited > limit {
			t.Errorf("%s: the return of 60 tokens was credited %v, above %v (owed at most %v: the bucket was at 90 since the grant)",
				tc.tenant, ret.Credited, limit, owed)
		}
	}
}

// TestClockBehindKeepsSharesAndCredits: a failover to a replica whose
// clock is d behind leaves every bucket's time where the old master left
// it (read_bucket: ts + 1 µs a call) until the clock catches up, so
// nothing refills for d, and what the keys hold stays consistent: a
// renewal replaces its instance's share in the record (no second share
// for the epoch: the record commits what the instances hold), the new
// share's window opens d later in the instance's clock (the reply's Wait
// is d: LocalWindow's lead), never earlier, and an unnamed return is
// aged from a clock d behind: further back in the bucket's time line,
// so credited less, never more.
func TestClockBehindKeepsSharesAndCredits(t *testing.T) {
	ctx := context.Background()
	_, rdb, _ := setup(t)
	prefix := redisserver.Prefix(t)
	client := func(id string) *Client {
		t.Helper()
		c, err := NewClient(rdb, prefix, WithInstance(id, 20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	x, y := client("x"), client("y")
	const tenant = "behind"
	key := Key(prefix, tenant)
	lim := Limits{Rate: 100, Burst: 10}
	const d = 20 * time.Second // the new master's clock behind the old one's
	terms := ShareTerms{Period: 10 * time.Second, Hold: time.Second}
	acquireOne(t, x, Request{Tenant: tenant, Limits: lim, Demand: 1000})
	acquireOne(t, y, Request{Tenant: tenant, Limits: lim, Demand: 1000})
	g := acquireOne(t, x, Request{Tenant: tenant, Limits: lim, Demand: 1000, Share: ShareAsk, ShareTerms: terms})
	if !g.RateShare.Held() {
		t.Fatalf("x got no share: %+v", g)
	}
	shiftTimes(t, rdb, key, d.Microseconds())
	before, err := rdb.HGet(ctx, key, "ts").Int64()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{x, y, x} { // x renews, y asks, x renews again
		sent := time.Now()
		g := acquireOne(t, c, Request{Tenant: tenant, Limits: lim, Demand: 1000, Share: ShareAsk, ShareTerms: terms})
		arrived := time.Now()
		if now := g.ServerTime.UnixMicro(); now <= before || now > before+10 {
			t.Fatalf("the bucket's time went from %d to %d on a clock %v behind: want a microsecond a call", before, now, d)
		}
		before = g.ServerTime.UnixMicro()
		if rs := g.RateShare; rs.Held() {
			lf, _ := rateshare.LocalWindow(sent.UnixMicro(), arrived.UnixMicro(), g.ServerTime.Add(-g.Wait).UnixMicro(),
				rateshare.Share{Rate: rs.Rate, From: rs.From.UnixMicro(), Until: rs.Until.UnixMicro()}, 1e-3)
			if lead := time.Duration(lf-arrived.UnixMicro()) * time.Microsecond; lead < d-time.Second {
				t.Errorf("a share granted on a clock %v behind opens %v after the reply", d, lead)
			}
		}
	}
	held := 0.0
	for _, id := range []string{"x", "y"} {
		v, err := rdb.HGet(ctx, InstancesKey(key), id).Result()
		if err != nil {
			t.Fatal(err)
		}
		p := strings.Split(v, ":")
		if r := strings.Split(p[3], "/"); len(r) == 3 {
			s, _ := strconv.ParseFloat(r[0], 64)
			held += s
		}
	}
	v, err := rdb.HGet(ctx, key, "sh").Result()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ParseShares(v)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(rec.Committed-held) > 1e-9 || rec.Committed > lim.Rate {
		t.Errorf("the record commits %v/s where the instances hold %v/s (rate %v)", rec.Committed, held, lim.Rate)
	}

	// An unnamed return on the clock behind: 60 of a full bucket (rate
	// 1/s, burst 100) granted, 50 s pass, the other 40 and the 50 refilled
	// taken, the 60 returned: 40 owed at most (the bucket was at 90 once
	// since), fewer on the clock behind.
	u, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	slow := Limits{Rate: 1, Burst: 100}
	ukey := u.Key("unnamed")
	sent := time.Now()
	if a, err := u.Acquire(ctx, "unnamed", slow, 60); err != nil || a.Granted != 60 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	shiftTimes(t, rdb, ukey, -50_000_000)
	if b, err := u.Acquire(ctx, "unnamed", slow, 1000); err != nil || b.Granted != 90 {
		t.Fatalf("second acquire: %+v %v", b, err)
	}
	shiftTimes(t, rdb, ukey, d.Microseconds())
	ret, err := u.Release(ctx, "unnamed", slow, 60, 50*time.Second+time.Since(sent)+time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ret.Credited > 11 {
		t.Errorf("on a clock %v behind, a return of 60 was credited %v: at most 11 owed", d, ret.Credited)
	}
}
