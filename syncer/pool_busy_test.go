package syncer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestExhaustedPoolIsBusy: a lease call that go-redis fails because its
// own pool has no connection to give says that the client is busy, not
// that Redis is down, as a wait for a connection that runs out of the
// call deadline does: MaxActiveConns reached, every connection out on
// another call (redis.ErrPoolExhausted, at once), or none back within
// PoolTimeout (redis.ErrPoolTimeout, error.type pool_exhausted). With
// Redis answering the read of the quota version 25 ms before, the tenant
// backs off and is not put in its failure mode. Before, ErrPoolExhausted
// counted as an outage: the tenant was failing, its mode deciding with
// Redis up. (ErrPoolTimeout was taken for congestion from the same
// change on; its case guards it.)
func TestExhaustedPoolIsBusy(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*redis.Options)
		want error
	}{
		// One connection at most, whose pool's turns (PoolSize) outnumber
		// it: a cap of connections, as a deployment sets it.
		{"MaxActiveConns", func(o *redis.Options) { o.PoolSize, o.MaxActiveConns = 4, 1 }, redis.ErrPoolExhausted},
		// One connection in the pool, and a wait for it shorter than
		// the call deadline.
		{"PoolTimeout", func(o *redis.Options) { o.PoolSize, o.PoolTimeout = 1, 50*time.Millisecond }, redis.ErrPoolTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) { testExhaustedPoolIsBusy(t, tc.opts, tc.want) })
	}
}

func testExhaustedPoolIsBusy(t *testing.T, set func(*redis.Options), want error) {
	srv := redisserver.StartServer(t)
	// Pipelines on the main pool (no dedicated pipeline pool), so that
	// the held connection is the one they need. (Options of their own:
	// srv.Client().Options() made a client nobody closed, whose
	// goroutines goleak found in the package's later tests, and whose
	// options a second client cannot share.)
	o := &redis.Options{Addr: srv.Addr, Password: srv.Password, ContextTimeoutEnabled: true, PipelinePoolSize: -1}
	set(o)
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	prefix := redisserver.Prefix(t)
	client, err := lease.NewClient(rdb, prefix, lease.WithInstance("me", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	now := func() time.Time { return clock }
	s := syncer.New(client, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now: now, Driven: true, CallTimeout: 2 * time.Second})
	defer s.Close()
	ctx := context.Background()
	s.Tick(ctx) // reads the quota version: Redis answers
	if st := s.Stats(); st.Errors != 0 {
		t.Fatalf("the first tick failed: %+v", st)
	}

	// Another caller of the client holds its one connection.
	held := make(chan error, 1)
	go func() { held <- rdb.BLPop(context.Background(), 0, prefix+"held").Err() }()
	deadline := time.Now().Add(10 * time.Second)
	for st := rdb.PoolStats(); st.TotalConns != 1 || st.IdleConns != 0; st = rdb.PoolStats() {
		if time.Now().After(deadline) {
			t.Fatalf("the BLPOP holds no connection: %+v", st)
		}
		time.Sleep(time.Millisecond) // polling interval; the deadline bounds the wait
	}
	if _, err := client.QuotaVersion(ctx); !errors.Is(err, want) {
		t.Fatalf("with the connection held: %v, want %v (the test shows nothing)", err, want)
	}

	tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tn.NoteMiss(1)
	clock = clock.Add(25 * time.Millisecond)
	s.Tick(ctx)
	if st := s.Stats(); st.Errors == 0 {
		t.Fatalf("no failed lease call: the test shows nothing (%+v)", st)
	}
	if tn.Failing() {
		t.Error("failing after the client's pool had no connection to give, 25 ms after Redis answered: want busy")
	}

	admin := srv.Client()
	defer admin.Close()
	if err := admin.LPush(ctx, prefix+"held", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}
