package main

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// TestEmbeddedRedisRunsLeaseScripts runs the same lease calls on the
// embedded Redis and on redis-server and compares the outcomes: the
// simulator is only as good as miniredis's run of acquire.lua and
// release.lua (TIME, HMGET/HSET, string.format("%.17g"), PEXPIRE,
// EVALSHA with a NOSCRIPT fallback, pipelines).
func TestEmbeddedRedisRunsLeaseScripts(t *testing.T) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mini := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer mini.Close()
	real := redistest.Client(t)
	prefix := redistest.Prefix(t)

	type outcome struct {
		granted []int64
		tokens  []float64
		ttl     time.Duration
	}
	run := func(c *redis.Client) outcome {
		ctx := context.Background()
		lc, err := lease.NewClient(c, prefix)
		if err != nil {
			t.Fatal(err)
		}
		lim := lease.Limits{Rate: 10, Burst: 100}
		var o outcome
		acquire := func(want int64) {
			g, err := lc.Acquire(ctx, "tenant/ü{1}", lim, want)
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			o.granted = append(o.granted, g.Granted)
			o.tokens = append(o.tokens, g.Tokens)
		}
		start := time.Now()
		acquire(30)  // new bucket: full, 30 of 100
		acquire(100) // partial: what is left
		acquire(0)   // just reads
		// An aged return, its age reaching back to before the first
		// grant: the bucket was full then, so it credits nothing; both
		// backends must agree.
		left, err := lc.Release(ctx, "tenant/ü{1}", lim, 40, time.Since(start)+time.Second)
		if err != nil {
			t.Fatalf("release: %v", err)
		}
		o.tokens = append(o.tokens, left.Tokens, left.Credited)
		full, err := lc.Release(ctx, "never-used", lim, 5, 0)
		if err != nil {
			t.Fatalf("release into a missing key: %v", err)
		}
		o.tokens = append(o.tokens, full.Tokens, full.Credited)
		o.ttl = c.PTTL(ctx, lc.Key("tenant/ü{1}")).Val()
		// Pipelined, after the script cache was flushed (NOSCRIPT).
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := lc.AcquireMany(ctx, []lease.Request{
			{Tenant: "a", Limits: lease.Limits{Rate: 2000, Burst: 400}, Want: 250},
			{Tenant: "b", Limits: lease.Limits{Rate: 0.5, Burst: 3}, Want: 5},
		}, nil)
		if err != nil {
			t.Fatalf("acquire many: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("acquire many: %v", r.Err)
			}
			o.granted = append(o.granted, r.Grant.Granted)
		}
		return o
	}
	got, want := run(mini), run(real)
	if !slices.Equal(got.granted, want.granted) {
		t.Errorf("granted on miniredis %v, on redis-server %v", got.granted, want.granted)
	}
	if !slices.Equal(want.granted, []int64{30, 70, 0, 250, 3}) {
		t.Errorf("granted on redis-server %v, want [30 70 0 250 3]", want.granted)
	}
	for i := range got.tokens {
		// The two servers run a few milliseconds apart: at 10 tokens/s
		// that refills well under one token.
		if math.Abs(got.tokens[i]-want.tokens[i]) > 1 {
			t.Errorf("tokens[%d]: miniredis %v, redis-server %v", i, got.tokens[i], want.tokens[i])
		}
	}
	// The return credited nothing (the grants came from a full bucket).
	if want.tokens[4] != 0 || got.tokens[4] != 0 {
		t.Errorf("credited: miniredis %v, redis-server %v, want 0", got.tokens[4], want.tokens[4])
	}
	// Key kept until refilled to full, plus a second: (100-0)/10 s + 1 s.
	for name, ttl := range map[string]time.Duration{"miniredis": got.ttl, "redis-server": want.ttl} {
		if ttl < 10*time.Second || ttl > 11*time.Second+100*time.Millisecond {
			t.Errorf("%s: TTL %v, want about 11s", name, ttl)
		}
	}
}

// TestProxyBlackHole checks the outage proxy: it forwards, then holds
// calls unanswered while down, then forwards again.
func TestProxyBlackHole(t *testing.T) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := newProxy(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ping := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping(time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.SetDown(true)
	for i := 0; i < 3; i++ {
		start := time.Now()
		if err := ping(100 * time.Millisecond); err == nil {
			t.Fatalf("PING answered while down")
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a call while down took %v, want about the 100ms deadline", d)
		}
	}
	p.SetDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for ping(time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no PING answered after the proxy came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProgressLine(t *testing.T) {
	var term bytes.Buffer
	p := newProgress(&term, true)
	p.start("leasequota")
	p.update(snapshot{Elapsed: time.Second, Decisions: 1000, Admitted: 600, Denied: 400, RoundTrips: 12})
	p.update(snapshot{Elapsed: 2 * time.Second, Decisions: 3000, Admitted: 1600, Denied: 1400, RoundTrips: 20})
	if s := term.String(); strings.Count(s, "\r") != 2 || strings.Contains(s, "\n") || !strings.Contains(s, "2,000 decisions/s") {
		t.Errorf("terminal: want two in-place updates, got %q", s)
	}
	p.done(snapshot{Elapsed: 2 * time.Second, Decisions: 3000, Admitted: 1600, Denied: 1400, RoundTrips: 20})
	if !strings.HasSuffix(term.String(), "\n") {
		t.Errorf("terminal: the line is not ended")
	}
	var plain bytes.Buffer
	p = newProgress(&plain, false)
	p.start("baseline")
	p.update(snapshot{Elapsed: time.Second, Decisions: 500, Admitted: 500, RoundTrips: 500})
	p.update(snapshot{Elapsed: 2 * time.Second, Decisions: 900, Admitted: 800, Denied: 100, RoundTrips: 900})
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	if len(lines) != 2 || strings.Contains(plain.String(), "\r") || !strings.HasPrefix(lines[1], "[baseline]   2.0s") ||
		!strings.Contains(lines[1], "400 decisions/s") || !strings.Contains(lines[1], "Redis calls 900") {
		t.Errorf("plain: want one line per update, got %q", plain.String())
	}
	if p.every() != time.Second || newProgress(nil, true).every() >= time.Second {
		t.Errorf("update periods")
	}
}
