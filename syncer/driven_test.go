package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sync/singleflight"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// recordingStore records the tenants and wants of every acquire, and
// fails every call while fail is set.
type recordingStore struct {
	lease.Store
	fail atomic.Bool
	// before, when set, runs before each acquire reaches the store: the
	// call's way to Redis, for a test to move the clock on.
	before func()

	mu       sync.Mutex // guards acquires
	acquires [][]lease.Request
}

var errDown = errors.New("test: store down")

func (s *recordingStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	s.mu.Lock()
	s.acquires = append(s.acquires, slices.Clone(reqs))
	s.mu.Unlock()
	if s.before != nil {
		s.before()
	}
	if s.fail.Load() {
		// No answer: what lease.Client reports when Redis is down.
		results = results[:0]
		for range reqs {
			results = append(results, lease.Result{Err: errDown})
		}
		return results, errDown
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

func (s *recordingStore) calls() [][]lease.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acquires)
}

// drivenRig is a driven-mode Syncer on memstore with a fake clock.
type drivenRig struct {
	s     *syncer.Syncer
	store *recordingStore
	clock atomic.Int64
}

func newDrivenRig(t *testing.T, interval time.Duration) *drivenRig {
	r := &drivenRig{}
	r.clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	view, err := memstore.New(memstore.WithClock(r.now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.store = &recordingStore{Store: view}
	r.s = syncer.New(r.store, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
		Now:     r.now,
		Driven:  true,
	})
	return r
}

func (r *drivenRig) now() time.Time { return time.Unix(0, r.clock.Load()) }

func (r *drivenRig) track(t *testing.T, name string) *syncer.Tenant {
	tn, err := r.s.Track(name, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// ready reports whether ch has an answer, and takes it.
func ready(ch <-chan singleflight.Result) (error, bool) {
	select {
	case r := <-ch:
		return r.Err, true
	default:
		return nil, false
	}
}

// TestDrivenRefillRunsInTheLoop: in driven mode a refill starts no
// goroutine: it waits in a queue until Refills runs it (in tenant name
// order, callers of one tenant joined, with the largest need), and its
// answer waits for Deliver.
func TestDrivenRefillRunsInTheLoop(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newDrivenRig(t, 100*time.Millisecond)
	ctx := context.Background()
	b, a := r.track(t, "b"), r.track(t, "a")
	chs := []<-chan singleflight.Result{
		r.s.Refill(ctx, b, 5),
		r.s.Refill(ctx, b, 30), // joins the first, raising its need
		r.s.Refill(ctx, a, 1),
	}
	if n := len(r.store.calls()); n != 0 {
		t.Fatalf("%d acquires before Refills: a refill ran on its own", n)
	}
	if !r.s.Refills(ctx) {
		t.Fatal("Refills ran none")
	}
	calls := r.store.calls()
	var order []string
	for _, c := range calls {
		if len(c) != 1 {
			t.Fatalf("a refill's acquire has %d requests, want 1", len(c))
		}
		order = append(order, c[0].Tenant)
	}
	if !slices.Equal(order, []string{"a", "b"}) {
		t.Errorf("refills acquired for %v, want [a b]: one call per tenant, in name order", order)
	}
	if len(calls) == 2 && calls[1][0].Want < 30 {
		t.Errorf("b's refill asked for %d, want at least the larger need, 30", calls[1][0].Want)
	}
	for i, ch := range chs {
		if _, ok := ready(ch); ok {
			t.Errorf("refill %d answered before Deliver", i)
		}
	}
	r.s.Deliver()
	for i, ch := range chs {
		if err, ok := ready(ch); !ok || err != nil {
			t.Errorf("refill %d after Deliver: answered %v, error %v; want nil", i, ok, err)
		}
	}
	if b.Held() < 30 || a.Held() < 1 {
		t.Errorf("a holds %d, b %d: want at least 1 and 30", a.Held(), b.Held())
	}
	if r.s.Refills(ctx) {
		t.Error("Refills ran a refill twice")
	}

	// Close answers a queued refill, and later ones, with ErrClosed; the
	// answer to the queued one waits for Deliver.
	queued := r.s.Refill(ctx, a, 2000)
	r.s.Close()
	if _, ok := ready(queued); ok {
		t.Error("a refill canceled by Close answered before Deliver")
	}
	r.s.Deliver()
	if err, ok := ready(queued); !ok || !errors.Is(err, syncer.ErrClosed) {
		t.Errorf("queued refill after Close and Deliver: answered %v, error %v; want ErrClosed", ok, err)
	}
	if err, ok := ready(r.s.Refill(ctx, a, 1)); !ok || !errors.Is(err, syncer.ErrClosed) {
		t.Errorf("refill after Close: answered %v, error %v; want ErrClosed at once", ok, err)
	}
	if err := r.s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDrivenRefillJoinedAcrossEviction: in driven mode a refill queued
// for an evicted tenant is joined by the requests of the tenant made anew
// with its name (the queue is by name): it leased nothing for either,
// and the new tenant's requests were left to retry within a refresh
// interval. It now refills the tenant that has the name.
func TestDrivenRefillJoinedAcrossEviction(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := newDrivenRig(t, 100*time.Millisecond)
	defer r.s.Close()
	ctx := context.Background()
	old := r.track(t, "a")
	first := r.s.Refill(ctx, old, 1) // queued
	for i := 0; !old.Evicted(); i++ {
		if i == 10 {
			t.Fatalf("the idle tenant was not evicted in %d ticks", i)
		}
		r.clock.Add(int64(time.Minute)) // the idle timeout
		r.s.Tick(ctx)
	}
	tn := r.track(t, "a")
	joined := r.s.Refill(ctx, tn, 1) // joins first: the same name
	r.s.Refills(ctx)
	r.s.Deliver()
	for i, ch := range []<-chan singleflight.Result{first, joined} {
		if err, ok := ready(ch); !ok || err != nil {
			t.Errorf("refill %d after Deliver: answered %v, error %v; want nil", i, ok, err)
		}
	}
	if tn.Held() < 1 || old.Held() != 0 {
		t.Errorf("after the refill the new tenant holds %d tokens, the evicted one %d; want a lease for the new one only", tn.Held(), old.Held())
	}
}

// TestDrivenTickInNameOrder: in driven mode a round visits its tenants in
// name order (without it, in map order), so a replay sends the same
// pipeline.
func TestDrivenTickInNameOrder(t *testing.T) {
	r := newDrivenRig(t, 100*time.Millisecond)
	defer r.s.Close()
	var names []string
	for i := range 40 {
		name := fmt.Sprintf("t%02d", (i*17)%40)
		r.track(t, name).NoteMiss(10)
		names = append(names, name)
	}
	slices.Sort(names)
	r.s.Tick(context.Background())
	calls := r.store.calls()
	if len(calls) != 1 {
		t.Fatalf("%d acquires, want one pipeline", len(calls))
	}
	var got []string
	for _, req := range calls[0] {
		got = append(got, req.Tenant)
	}
	if !slices.Equal(got, names) {
		t.Errorf("the round's pipeline has tenants %v, want them in name order", got)
	}
}

// TestDrivenRecoveredWaitsForDeliver: in driven mode the wake-up of
// requests waiting through an outage (Recovered) is held until Deliver,
// so that they do not run beside the step that saw Redis answer again.
func TestDrivenRecoveredWaitsForDeliver(t *testing.T) {
	const interval = 10 * time.Millisecond // the breaker's open time
	r := newDrivenRig(t, interval)
	defer r.s.Close()
	ctx := context.Background()
	tn := r.track(t, "a")
	r.store.fail.Store(true)
	// Fail calls until the breaker opens.
	for i := 0; !r.s.Degraded(); i++ {
		if i == 100 {
			t.Fatal("the breaker did not open after 100 failed refills")
		}
		r.s.Refill(ctx, tn, 1)
		r.s.Refills(ctx)
		r.s.Deliver()
		r.clock.Add(int64(time.Second)) // past the tenant's backoff
	}
	recovered := r.s.Recovered()
	r.store.fail.Store(false)
	// The breaker lets a probe through after interval of real time.
	deadline := time.Now().Add(10 * time.Second)
	for r.s.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not close within 10s of the store answering")
		}
		r.s.Refill(ctx, tn, 1)
		r.s.Refills(ctx)
		r.clock.Add(int64(time.Second))
		time.Sleep(interval / 10) // real time: gobreaker's clock
	}
	select {
	case <-recovered:
		t.Fatal("Recovered fired before Deliver")
	default:
	}
	r.s.Deliver()
	select {
	case <-recovered:
	default:
		t.Fatal("Recovered did not fire at Deliver")
	}
}
