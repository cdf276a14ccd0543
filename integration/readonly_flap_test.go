package integration

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestReadOnlyRedisStaysAnOutage: while Redis answers READONLY to every
// script and the limiter makes no lease call (its requests stopped as
// the fault began), the breaker stays open, on a process that runs when
// it wants to (checkStaysAnOutage). The read of the quota version
// probes it then, and a replica answers reads: taken for Redis answering,
// it closed the breaker each interval, Degraded false in 355 of 1,698
// samples over 2 s (4 flips), every failed tenant's call going again at
// once to fail. And once Redis runs writes again, that probe closes the
// breaker with no traffic.
func TestReadOnlyRedisStaysAnOutage(t *testing.T) {
	l, ld, admin := noCommandLoad(t)
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // a port nothing listens on: the replica never syncs
	checkStaysAnOutage(t, l, ld, "READONLY", func() {
		if err := admin.Do(ctx, "replicaof", "127.0.0.1", dead).Err(); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := admin.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNoReplicasRedisStaysAnOutage: as TestReadOnlyRedisStaysAnOutage, for
// a master short of min-replicas-to-write, which serves reads too.
func TestNoReplicasRedisStaysAnOutage(t *testing.T) {
	l, ld, admin := noCommandLoad(t)
	ctx := context.Background()
	checkStaysAnOutage(t, l, ld, "NOREPLICAS", func() {
		if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := admin.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// checkStaysAnOutage begins the fault, stops the load once the limiter
// is Degraded, samples Degraded each millisecond for 2 s (it must stay
// true), ends the fault, and waits for Degraded false with no traffic.
func checkStaysAnOutage(t *testing.T, l *leasequota.Limiter, ld *faultLoad, reply string, begin, end func()) {
	t.Helper()
	begin()
	faultWait(t, 3*time.Second, "Degraded while Redis runs no command", l.Degraded)
	ld.stopLoad()
	probe := startStallProbe()
	from := time.Now()
	var samples, up, flips int
	last := true
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) { // sampling period over the fault
		d := l.Degraded()
		samples++
		if !d {
			up++
		}
		if d != last {
			flips++
		}
		last = d
	}
	to := time.Now()
	probe.Stop()
	t.Logf("%s for 2 s: Degraded false in %d of %d samples, %d flips; %v", reply, up, samples, flips, probe)
	// Beside two busy loops under the race detector this flipped twice
	// (136 of 1,778 samples false at 8978845, 138 of 1,787 at efff39a with
	// this process on time): a call that timed out in the fault, the
	// reply read late or a starved redis-server slow to send it, was
	// taken for a busy Redis or made the read probe skip its write. Since
	// 930595d neither closes the breaker in an outage of READONLY or
	// NOREPLICAS replies (TestReadOnlyOutageOutlivesATimeout in the root
	// package). The margin for a process that did not run when it wanted
	// to (late by half the call deadline, 25 ms by default) stays: what
	// else such a stall may do was not measured here.
	if late := probe.worst(from, to); up > 0 && late >= 25*time.Millisecond {
		t.Logf("Degraded false in %d of %d samples (%d flips) while Redis answered %s, this process late up to %v: explained", up, samples, flips, reply, late)
	} else if up > 0 {
		t.Errorf("Degraded false in %d of %d samples (%d flips) while Redis answered %s, this process late %v at most", up, samples, flips, reply, late)
	}
	end()
	took := faultWait(t, 5*time.Second, "Degraded false once Redis runs writes again, with no traffic", func() bool { return !l.Degraded() })
	t.Logf("Degraded false %v after the fault ended", took)
}
