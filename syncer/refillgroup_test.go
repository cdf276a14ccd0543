package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sync/singleflight"

	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// slotsStore holds every acquire call until gate closes, after telling
// entered, and records each call's number of requests; with broken set,
// a call of more than one request gets no results.
type slotsStore struct {
	lease.Store
	gate    chan struct{}
	entered chan struct{}
	broken  bool

	mu    sync.Mutex
	sizes []int // guarded by mu
}

func (s *slotsStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(reqs))
	s.mu.Unlock()
	s.entered <- struct{}{}
	<-s.gate
	if s.broken && len(reqs) > 1 {
		return nil, errors.New("no answer")
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

func (s *slotsStore) callSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// gatherRefills takes every call slot of a syncer on st with a refill held
// in the store, then starts n refills of other tenants and waits until
// they are gathered in one group; it returns the held refills' and the
// gathered ones' answers.
func gatherRefills(t *testing.T, s *syncer.Syncer, st *slotsStore, n int) (held, gathered []<-chan singleflight.Result) {
	t.Helper()
	ctx := context.Background()
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 10, LeaseTTL: time.Minute})
	for i := range syncer.MaxInFlight {
		held = append(held, s.Refill(ctx, track(fmt.Sprint("held", i)), 1))
		<-st.entered
	}
	for i := range n {
		gathered = append(gathered, s.Refill(ctx, track(fmt.Sprint("gathered", i)), 1))
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.RefillsGathered() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d refills gathered in 10 s while the slots were taken", s.RefillsGathered(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return held, gathered
}

// TestRefillsWaitingForASlotShareACall: with every call slot of the node
// taken, the refills that come meanwhile are gathered and sent in one
// call once a slot is free, each tenant getting its own lease from it;
// a refill that finds a slot free goes alone.
func TestRefillsWaitingForASlotShareACall(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	st := &slotsStore{Store: view, gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{}, 1), Now: clock.Now, CallTimeout: 10 * time.Second})
	defer s.Close()
	const n = 20
	held, gathered := gatherRefills(t, s, st, n)
	close(st.gate)
	for i, ch := range append(held, gathered...) {
		if r := <-ch; r.Err != nil {
			t.Fatalf("refill %d: %v", i, r.Err)
		}
	}
	for i := range n {
		if tn := s.Tenant(fmt.Sprint("gathered", i)); tn == nil || tn.Held() < 1 {
			t.Fatalf("gathered%d holds no lease after its refill", i)
		}
	}
	sizes := st.callSizes()
	want := []int{1, 1, 1, 1, 1, 1, 1, 1, n}
	if len(sizes) != len(want) || sizes[len(sizes)-1] != n {
		t.Fatalf("acquire calls of %v requests, want %v: the refills that waited for a slot in one call", sizes, want)
	}
	for _, size := range sizes[:syncer.MaxInFlight] {
		if size != 1 {
			t.Fatalf("acquire calls of %v requests, want %v", sizes, want)
		}
	}
}

// TestGatheredRefillsShareTheirCallsFailure: a gathered call that gets no
// results fails every refill in it with lease.ErrBadReply, and none of
// them panics or waits for another call.
func TestGatheredRefillsShareTheirCallsFailure(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	st := &slotsStore{Store: view, gate: make(chan struct{}), entered: make(chan struct{}, 64), broken: true}
	s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{}, 1), Now: clock.Now, CallTimeout: 10 * time.Second})
	defer s.Close()
	held, gathered := gatherRefills(t, s, st, 5)
	close(st.gate)
	for i, ch := range held {
		if r := <-ch; r.Err != nil {
			t.Fatalf("held refill %d: %v", i, r.Err)
		}
	}
	for i, ch := range gathered {
		if r := <-ch; !errors.Is(r.Err, lease.ErrBadReply) {
			t.Fatalf("gathered refill %d: error %v, want one wrapping lease.ErrBadReply", i, r.Err)
		}
	}
	if tn := s.Tenant("gathered0"); tn == nil || tn.Held() != 0 {
		t.Fatal("a gathered tenant holds tokens after its call failed")
	}
}

// TestGatheredRefillsOnRedis, on a redis-server of its own: refills
// gathered while the node's slots are held (in the store, before Redis)
// go to Redis as one pipeline of multi-tenant scripts (lease.WithBatch(8):
// 5 EVALSHA for 40 tenants), and each tenant gets the lease it asked for
// from its own bucket.
func TestGatheredRefillsOnRedis(t *testing.T) {
	// After the server's own cleanup, which stops it.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := redisserver.StartServer(t)
	rdb := srv.Client()
	defer rdb.Close()
	c, err := lease.NewClient(rdb, redisserver.Prefix(t), lease.WithBatch(8), lease.WithInstance("me", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The first call of a new server loads the script: before the count.
	if _, err := c.AcquireMany(ctx, []lease.Request{{Tenant: "warm", Limits: lease.Limits{Rate: 1, Burst: 1}, Want: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	st := &slotsStore{Store: c, gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{}, 1), CallTimeout: 10 * time.Second})
	defer s.Close()
	const n = 40
	evalsha := func() int64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
				v, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		return 0
	}
	held, gathered := gatherRefills(t, s, st, n)
	before := evalsha()
	close(st.gate)
	for i, ch := range held {
		if r := <-ch; r.Err != nil {
			t.Fatalf("held refill %d: %v", i, r.Err)
		}
	}
	for i, ch := range gathered {
		if r := <-ch; r.Err != nil {
			t.Fatalf("gathered refill %d: %v", i, r.Err)
		}
	}
	for i := range n {
		if tn := s.Tenant(fmt.Sprint("gathered", i)); tn == nil || tn.Held() < 1 {
			t.Fatalf("gathered%d holds no lease after its refill", i)
		}
	}
	if sizes := st.callSizes(); len(sizes) != syncer.MaxInFlight+1 || sizes[len(sizes)-1] != n {
		t.Fatalf("acquire calls of %v requests, want %d of 1 and one of %d", sizes, syncer.MaxInFlight, n)
	}
	// One script for each held call's tenant, one for each 8 of the
	// gathered call's (40 if each gathered refill went alone).
	if got, want := evalsha()-before, int64(syncer.MaxInFlight+n/8); got != want {
		t.Fatalf("Redis ran %d EVALSHA for the refills, want %d: one a held call, and 8 tenants a script in the gathered one", got, want)
	}
}
