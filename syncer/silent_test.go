package syncer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// muteStore is a store that answers until mute is set, and then times
// out every lease call and read of the quota version, each after moving
// the test's clock by took (readTook for a read): its deadline or less
// for a Redis that is silent, far more for a process too short of CPU to
// time its calls out at their deadline.
type muteStore struct {
	lease.Store
	clock          *atomic.Int64 // unix nanoseconds
	mute           *atomic.Bool
	took, readTook time.Duration
}

func (s muteStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if !s.mute.Load() {
		return s.Store.AcquireMany(ctx, reqs, results)
	}
	s.clock.Add(int64(s.took))
	return lateStore{s.Store}.AcquireMany(ctx, reqs, results)
}

func (s muteStore) QuotaVersion(ctx context.Context) (int64, error) {
	if !s.mute.Load() {
		return s.Store.QuotaVersion(ctx)
	}
	s.clock.Add(int64(s.readTook))
	return 0, context.DeadlineExceeded
}

// TestSilenceCountsFromTheFirstCallUnanswered: a Redis is taken for down
// (the tenant failing, its failure mode deciding) once it has answered
// nothing in time for downAfter while the limiter asked it, counted from
// the first call after its last answer that timed out at its deadline,
// not from that answer. A limiter that sent nothing for most of
// downAfter after its last answer (a process short of CPU), and whose
// calls then time out, is busy until downAfter after the first of them,
// then failing. Timeouts that come far past their deadline (the process
// was short of CPU: the reply may have come in time) count as silence
// only from lateGrace times downAfter after the last answer. Before, a
// timeout downAfter after the last answer made the tenant failing
// whatever came between: BenchmarkFleet at 32 x 2,000 with rate shares
// decided up to 5,687 requests by the failure mode with Redis up.
func TestSilenceCountsFromTheFirstCallUnanswered(t *testing.T) {
	const (
		iv     = 100 * time.Millisecond
		callTO = 10 * time.Millisecond
		d      = time.Second // the lease TTL, which downAfter is
		gap    = 900 * time.Millisecond
	)
	for _, tc := range []struct {
		name string
		// Each timed-out call's time on the clock: a lease call's (its
		// deadline callTO) and a read's (its deadline half of d).
		took, readTook time.Duration
		// Since the last answer: the tenant must not be failing before
		// notBefore, and must be by failingBy.
		notBefore, failingBy time.Duration
	}{
		{name: "silent", took: callTO, readTook: d / 2, notBefore: gap + d - iv, failingBy: gap + d + 4*iv},
		// Every timeout more than its deadline late: failing once no
		// answer came in time for lateGrace times d, at the first lease
		// call that times out after (a tick, its lease call, its read).
		{name: "late timeouts", took: 20 * callTO, readTook: 6 * d / 5, notBefore: syncer.LateGrace*d - 20*callTO - iv,
			failingBy: syncer.LateGrace*d + 6*d/5 + 20*callTO + iv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			mute := new(atomic.Bool)
			st := muteStore{Store: view, clock: &clock, mute: mute, took: tc.took, readTook: tc.readTook}
			s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: iv}, 1), Now: now, CallTimeout: callTO, Driven: true,
				Defaults: quota.Defaults{LeaseTTL: d, Interval: iv}})
			defer s.Close()
			ctx := context.Background()
			tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: d})
			if err != nil {
				t.Fatal(err)
			}
			// Answered: the tenant leases, the reads come back in time.
			for range 8 {
				tn.NoteMiss(1)
				clock.Add(int64(iv / 4))
				s.Tick(ctx)
				s.Wait()
			}
			if tn.Failing() || s.Stats().Errors != 0 {
				t.Fatalf("failing %v with %d failed calls while Redis answered", tn.Failing(), s.Stats().Errors)
			}
			// The last answer, then nothing asked for gap, then every call
			// times out.
			mute.Store(true)
			last := now()
			clock.Add(int64(gap))
			var failedAt time.Duration
			for now().Sub(last) < 2*syncer.LateGrace*d {
				tn.NoteMiss(1)
				clock.Add(int64(iv / 4))
				tickAt := now().Sub(last)
				s.Tick(ctx)
				s.Wait()
				if tn.Failing() {
					failedAt = tickAt
					break
				}
			}
			t.Logf("failing %v after the last answer (0: never), %d lease calls failed", failedAt, s.Stats().Errors)
			if s.Stats().Errors == 0 {
				t.Fatal("no failed lease call counted: the test shows nothing")
			}
			if failedAt == 0 || failedAt < tc.notBefore || failedAt > tc.failingBy {
				t.Errorf("failing %v after the last answer (0: never), want in [%v, %v]", failedAt, tc.notBefore, tc.failingBy)
			}
		})
	}
}
