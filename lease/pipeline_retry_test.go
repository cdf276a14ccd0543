package lease

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// loadingFirst is a Scripter whose pipelines begin with a command that
// Redis answers LOADING the first time it runs and OK after: the first
// command of a pipeline that got a reply go-redis retries (LOADING,
// READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, ...), while the commands
// after it ran, as when a large pipeline reaches a Redis that finishes
// loading its data while reading it. go-redis then sends the whole
// pipeline again (up to MaxRetries), commands that ran included: it looks
// at the first command's reply alone.
type loadingFirst struct {
	*redis.Client
	flag string // the key the first command counts its runs in
}

func (s loadingFirst) Pipeline() redis.Pipeliner {
	p := s.Client.Pipeline()
	p.Eval(context.Background(), `if redis.call('incr', KEYS[1]) == 1 then
	return redis.error_reply('LOADING Redis is loading the dataset in memory')
end
return 'ok'`, []string{s.flag})
	return p
}

// TestReleasePipelineReplayedByGoRedis: a release pipeline that go-redis
// sends again because its first reply was LOADING credits each release
// once with WithInstance (the Limiter's lease.Client has it: its release
// ids make the replay credit 0), and twice without, as Release's doc
// warns. Why a test: releases are pipelined (ReleaseMany) and go-redis
// retries a pipeline by its first reply, so a release that ran can run
// again; only the release ids keep the bound. Acquires are pipelined
// apart from releases (runMany runs one script), so no replay of an
// acquire's pipeline carries a release.
func TestReleasePipelineReplayedByGoRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	lim := Limits{Rate: 0.001, Burst: 100} // refills nothing within the test
	// Cached, so that the releases run in the first pipeline (a NOSCRIPT
	// would run nothing, and they would go again, with EVAL, once).
	if err := rdb.ScriptLoad(ctx, releaseScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		opts     []ClientOption
		credited float64 // in the bucket after the release of 10
	}{
		{"WithInstance", []ClientOption{WithInstance("a", time.Minute)}, 10},
		{"anonymous", nil, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := redisserver.Prefix(t)
			plain, err := NewClient(rdb, prefix, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			flag := prefix + "{flag}"
			replayed, err := NewClient(loadingFirst{rdb, flag}, prefix, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			tenants := []string{"x", "y"}
			reqs := make([]ReleaseRequest, len(tenants))
			for i, tenant := range tenants {
				g, err := plain.Acquire(ctx, tenant, lim, lim.Burst)
				if err != nil || g.Granted != lim.Burst {
					t.Fatalf("acquire of %s: %+v, %v; want the whole burst", tenant, g, err)
				}
				reqs[i] = ReleaseRequest{Tenant: tenant, Limits: lim, Amount: 10, Age: time.Second, Grant: g.ID()}
			}
			for i, r := range replayed.ReleaseMany(ctx, reqs) {
				if r.Err != nil {
					t.Fatalf("release of %s: %v", tenants[i], r.Err)
				}
				t.Logf("%s: the reply (of the replay) says %v credited", tenants[i], r.Return.Credited)
			}
			if runs, err := rdb.Get(ctx, flag).Int(); err != nil || runs != 2 {
				t.Fatalf("the pipeline's first command ran %d times (%v), want 2: go-redis did not send the pipeline again", runs, err)
			}
			for _, tenant := range tenants {
				in, err := plain.Inspect(ctx, tenant)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %.3f tokens after a release of 10 sent twice", tenant, in.Tokens)
				if in.Tokens < tc.credited-0.5 || in.Tokens > tc.credited+0.5 {
					t.Errorf("%s: %.3f tokens after the release of 10 from an empty bucket, want %v", tenant, in.Tokens, tc.credited)
				}
			}
		})
	}
}
