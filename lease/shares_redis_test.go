package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// The scripts honour a bucket's record of rate shares (field sh), which a
// later release writes and this one does not: these tests write it with
// HSET and hold what the scripts then do to RefillShares and Settled, the
// rule in Go (held to internal/rateshare's model in shares_test.go).

// sharedBucket writes tenant's bucket as tk tokens at ts with the shares
// sh recorded (none for the zero Shares), as a later release would leave
// it.
func sharedBucket(t *testing.T, rdb *redis.Client, key string, tk float64, ts int64, sh Shares) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	fields := []any{"tk", strconv.FormatFloat(tk, 'g', 17, 64), "ts", ts}
	if sh != (Shares{}) {
		fields = append(fields, "sh", sh.String())
	}
	if err := rdb.HSet(ctx, key, fields...).Err(); err != nil {
		t.Fatal(err)
	}
}

// redisMicros is Redis TIME in µs.
func redisMicros(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// checkSharesWritten fails unless key's sh is what the shares left in
// force after a call say (absent for none) and its TTL is Settled's rule
// counted from the call's time at, read at most by the Redis time after.
func checkSharesWritten(t *testing.T, rdb *redis.Client, key string, what string, level float64, at int64, lim Limits, left Shares) {
	t.Helper()
	ctx := context.Background()
	v, err := rdb.HGet(ctx, key, "sh").Result()
	switch {
	case left.InForce() && (err != nil || v != left.String()):
		t.Fatalf("%s: sh %q (%v), want %q", what, v, err, left.String())
	case !left.InForce() && !errors.Is(err, redis.Nil):
		t.Fatalf("%s: sh %q (%v), want none", what, v, err)
	}
	until, full := Settled(level, at, lim.Rate, lim.Burst, left)
	ttl := int64(math.Ceil(float64(until-at)/1000+(float64(lim.Burst)-full)/lim.Rate*1000)) + 1000
	got := pttl(t, rdb, key)
	elapsed := (redisMicros(t, rdb) - at + 999) / 1000
	if got > ttl || got < ttl-elapsed-2 {
		t.Fatalf("%s: PTTL %d ms, want %d less the %d ms since the call", what, got, ttl, elapsed)
	}
}

// TestScriptsRefillByShares: over seeded random buckets with shares
// recorded (in force, booked into the next epoch, ended, and records
// older than the bucket's time), an acquire's level is RefillShares's to
// the bit, and the sh and TTL it writes are what RefillShares leaves and
// Settled's rule; a release refills the same way before it credits.
func TestScriptsRefillByShares(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	r := rand.New(rand.NewPCG(15, 1))
	const tenant = "shared"
	key := c.Key(tenant)
	for i := range 300 {
		lim := Limits{Rate: math.Round(math.Exp(r.Float64()*12-2)*1000) / 1000, Burst: 1 + r.Int64N(100000)}
		period := int64(1000 + r.Int64N(20_000_000))
		sh := Shares{Period: period, Phase: r.Int64N(period)}
		now := redisMicros(t, rdb)
		ts := now - r.Int64N(3*period)
		sh.Epoch = (ts-sh.Phase)/period - r.Int64N(3)/2 // a third of them stale by an epoch
		sh.Committed = lim.Rate * r.Float64() * 1.2
		if r.IntN(2) == 0 {
			sh.Booked = sh.Committed * r.Float64()
		}
		tk := float64(lim.Burst) * r.Float64()
		what := fmt.Sprintf("case %d: %+v at %d, %v tokens, %+v", i, lim, ts, tk, sh)
		sharedBucket(t, rdb, key, tk, ts, sh)
		if i%4 == 3 {
			ret, err := c.Release(ctx, tenant, lim, 1, time.Hour)
			if err != nil {
				t.Fatalf("%s: release: %v", what, err)
			}
			at := ret.ServerTime.UnixMicro()
			level, left := RefillShares(tk, ts, at, lim.Rate, lim.Burst, sh)
			if want := min(level+ret.Credited, float64(lim.Burst)); ret.Tokens != want {
				t.Fatalf("%s: release left %v tokens, credited %v; RefillShares says %v before, %v after", what, ret.Tokens, ret.Credited, level, want)
			}
			checkSharesWritten(t, rdb, key, what, ret.Tokens, at, lim, left)
			continue
		}
		g, err := c.Acquire(ctx, tenant, lim, 0)
		if err != nil {
			t.Fatalf("%s: acquire: %v", what, err)
		}
		at := g.ServerTime.UnixMicro()
		level, left := RefillShares(tk, ts, at, lim.Rate, lim.Burst, sh)
		if g.Tokens != level {
			t.Fatalf("%s: acquire at %d read %v tokens, RefillShares %v", what, at, g.Tokens, level)
		}
		checkSharesWritten(t, rdb, key, what, level, at, lim, left)
	}
}

// TestScriptsReserveNothingUnderShares: a reservation assumes the bucket
// refills at the rate, which it does not while shares are in force, so an
// acquire that would reserve on a bucket without shares does not on one
// with them, and leaves its time at the call's.
func TestScriptsReserveNothingUnderShares(t *testing.T) {
	ctx := context.Background()
	_, rdb, _ := setup(t)
	c, err := NewClient(rdb, redisserver.Prefix(t), WithInstance("a", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 100, Burst: 100}
	for _, shared := range []bool{false, true} {
		tenant := fmt.Sprintf("dry-%v", shared)
		key := c.Key(tenant)
		now := redisMicros(t, rdb)
		var sh Shares
		if shared {
			sh = Shares{Epoch: now / 10_000_000, Committed: 50, Period: 10_000_000}
		}
		sharedBucket(t, rdb, key, 0, now, sh)
		res, err := c.AcquireMany(ctx, []Request{{Tenant: tenant, Limits: lim, Want: 50, Demand: 200, Reserve: 2 * time.Second}}, nil)
		if err != nil || res[0].Err != nil {
			t.Fatalf("acquire: %v %+v", err, res)
		}
		g := res[0].Grant
		if shared && g.Reserved != 0 {
			t.Errorf("with shares in force: reserved %d, want none", g.Reserved)
		}
		if !shared && g.Reserved == 0 {
			t.Errorf("without shares: reserved nothing, the case does not test a reservation (%+v)", g)
		}
	}
}

// TestCorruptSharesField: a bucket whose sh does not read is reported
// corrupt by every script that reads it, and left as it is.
func TestCorruptSharesField(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	key := c.Key("t")
	lim := Limits{Rate: 1, Burst: 10}
	for _, v := range []string{"garbage", "1:1:0:999:0", "1:1:2:10000:0", "1:nan:0:10000:0", "1:1:0:10000:10000"} {
		if err := rdb.HSet(ctx, key, "tk", "1", "ts", "1", "sh", v).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(ctx, "t", lim, 1); err == nil || !strings.Contains(err.Error(), "corrupt bucket") {
			t.Errorf("Acquire with sh %q: %v, want a corrupt bucket", v, err)
		}
		if _, err := c.Release(ctx, "t", lim, 1, 0); err == nil || !strings.Contains(err.Error(), "corrupt bucket") {
			t.Errorf("Release with sh %q: %v, want a corrupt bucket", v, err)
		}
		if got, _ := rdb.HGet(ctx, key, "sh").Result(); got != v {
			t.Errorf("sh %q overwritten with %q", v, got)
		}
		if _, err := c.Inspect(ctx, "t"); !errors.Is(err, ErrBadShares) {
			t.Errorf("Inspect with sh %q: %v, want ErrBadShares", v, err)
		}
	}
}
