package integration

import (
	"context"
	"log/slog"
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// The benchmarks in this file compare, on the harness's Redis (loopback),
// a decision of leasequota with the per-request Redis limiter it replaces:
//
//   - BenchmarkAllowOnRedis: a Limiter made by New on that Redis, with a
//     tenant holding a large lease: no Redis call on the request path
//     (the root package's BenchmarkAllow is the same on the in-process
//     store, beside the golang.org/x/time/rate baselines);
//   - BenchmarkRedisPerRequest: one Lua script call per decision.

// redisBenchQuota lets a tenant lease enough tokens for any b.N: every
// lease is at least 2^30 tokens, so the request path never runs short.
var redisBenchQuota = leasequota.Quota{Rate: 1e12, Burst: 1 << 40, MinLease: 1 << 30}

func BenchmarkAllowOnRedis(b *testing.B) {
	l, err := leasequota.New(redistest.Client(b), leasequota.WithKeyPrefix(redistest.Prefix(b)),
		leasequota.WithDefaultQuota(redisBenchQuota), leasequota.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close(context.Background()) })
	if !l.Allow("t") { // the cold start: lease the tokens first
		b.Fatal("first request denied")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !l.Allow("t") {
			b.Fatal("denied")
		}
	}
}

// BenchmarkRedisPerRequest makes one acquire script call per decision on
// the harness's Redis (loopback), the cost leasequota keeps off the
// request path.
func BenchmarkRedisPerRequest(b *testing.B) {
	p := newPerRequestLimiter(b, redistest.Client(b), redistest.Prefix(b), redisBenchQuota)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if ok, err := p.allow(ctx, "t"); !ok {
			b.Fatal("denied", err)
		}
	}
}

// perRequestLimiter is the per-request Lua limiter leasequota replaces:
// every decision is one acquire script call for one token on the
// tenant's bucket in Redis (lease.Client.Acquire). BenchmarkRedisPerRequest
// and BenchmarkCompare's lua-per-request use it.
type perRequestLimiter struct {
	c   *lease.Client
	lim lease.Limits
}

func newPerRequestLimiter(tb testing.TB, s lease.Scripter, prefix string, q leasequota.Quota) *perRequestLimiter {
	tb.Helper()
	c, err := lease.NewClient(s, prefix)
	if err != nil {
		tb.Fatal(err)
	}
	return &perRequestLimiter{c: c, lim: lease.Limits{Rate: q.Rate, Burst: q.Burst}}
}

// allow spends one token of tenant's bucket if it has one. A failed call
// is a denial, with its error.
func (p *perRequestLimiter) allow(ctx context.Context, tenant string) (bool, error) {
	g, err := p.c.Acquire(ctx, tenant, p.lim, 1)
	return err == nil && g.Granted == 1, err
}
