package integration

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// noCommandLoad starts what the tests of a Redis that answers but runs
// no command share: a dedicated server, a limiter on it with the failure
// quotas, its load for half a second with Redis well, and an admin client.
func noCommandLoad(t *testing.T) (*leasequota.Limiter, *faultLoad, *redis.Client) {
	t.Helper()
	leakCheck(t)
	srv := redistest.StartServer(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	names, quota := failureQuotas()
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithQuotaFunc(quota))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	ld := startFaultLoad(l, names, 2*500, 8, 100*time.Millisecond, 100*time.Millisecond)
	t.Cleanup(func() {
		select {
		case <-ld.stop:
		default:
			ld.stopLoad()
		}
	})
	faultResumed(t, ld, 5*time.Second) // leasing, before the fault
	return l, ld, admin
}

// checkRunsNoCommand runs the fault (begin, then end) under the load: the
// limiter must take it for an outage (Degraded, its failure modes
// deciding) and lease again once it ended.
func checkRunsNoCommand(t *testing.T, l *leasequota.Limiter, ld *faultLoad, begin, end func()) {
	t.Helper()
	begin()
	took := faultWait(t, 3*time.Second, "Degraded while Redis runs no command", l.Degraded)
	t.Logf("Degraded %v after the fault began", took)
	time.Sleep(300 * time.Millisecond) // the failure modes decide meanwhile
	end()
	took = faultWait(t, 5*time.Second, "Degraded false once Redis runs commands again", func() bool { return !l.Degraded() })
	t.Logf("Degraded false %v after the fault ended", took)
	faultResumed(t, ld, 5*time.Second)
	ld.stopLoad()
	t.Log(ld.summary())
	checkFailureModes(t, ld, l.Stats())
}

// TestReadOnlyRedisIsAnOutage: a Redis that answers READONLY to every
// script (a replica: here REPLICAOF to a master that is not there; in
// production a failover's demoted master still reached at its address)
// serves no lease. The limiter takes it for an outage: the breaker opens
// (Degraded, OnDegraded's warning with the reply), and its probes find
// Redis again after REPLICAOF NO ONE. Before, each tenant's call failed
// on its own with the breaker closed: Degraded stayed false for the 2 s
// of READONLY replies (384 of them), nothing was logged, and every round
// still sent each tenant's call.
func TestReadOnlyRedisIsAnOutage(t *testing.T) {
	l, ld, admin := noCommandLoad(t)
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // a port nothing listens on: the replica never syncs
	checkRunsNoCommand(t, l, ld, func() {
		if err := admin.Do(ctx, "replicaof", "127.0.0.1", dead).Err(); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := admin.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
			t.Fatal(err)
		}
	})
	if n := redisErrorStat(t, admin, "READONLY"); n == 0 {
		t.Error("Redis answered READONLY 0 times: the test did not exercise it")
	}
}

// TestBusyRedisIsAnOutage: a Redis running a script past
// busy-reply-threshold answers BUSY to every other command until the
// script ends (SCRIPT KILL here). As READONLY: an outage, not a failure
// of each tenant's.
func TestBusyRedisIsAnOutage(t *testing.T) {
	l, ld, admin := noCommandLoad(t)
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	opts := *admin.Options()
	opts.ReadTimeout = -1 // the script runs until killed
	spin := redis.NewClient(&opts)
	defer spin.Close()
	spun := make(chan error, 1)
	checkRunsNoCommand(t, l, ld, func() {
		go func() { spun <- spin.Eval(ctx, "while true do end", nil).Err() }()
	}, func() {
		if err := admin.Do(ctx, "script", "kill").Err(); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-spun; err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("the endless script ended with %v, want its SCRIPT KILL error", err)
	}
	if n := redisErrorStat(t, admin, "BUSY"); n == 0 {
		t.Error("Redis answered BUSY 0 times: the test did not exercise it")
	}
}

// TestNoReplicasRedisIsAnOutage: a Redis with min-replicas-to-write
// above the replicas it has (the replica of a deployment that waits for
// one is gone) refuses every write, so every script (NOREPLICAS). As
// READONLY: an outage.
func TestNoReplicasRedisIsAnOutage(t *testing.T) {
	l, ld, admin := noCommandLoad(t)
	ctx := context.Background()
	checkRunsNoCommand(t, l, ld, func() {
		if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := admin.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
			t.Fatal(err)
		}
	})
	if n := redisErrorStat(t, admin, "NOREPLICAS"); n == 0 {
		t.Error("Redis answered NOREPLICAS 0 times: the test did not exercise it")
	}
}
