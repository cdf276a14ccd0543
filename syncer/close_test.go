package syncer

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/quota"
)

// TestCloseWaitsForARefillsCall: Close does not cancel a refill's lease
// call in flight, which CallTimeout bounds, but waits for it; the tokens
// it got are then the lease's, which ReleaseAll returns. Canceled, the
// reply would be lost with the tokens Redis granted (and a rate share it
// asked for).
func TestCloseWaitsForARefillsCall(t *testing.T) {
	defer goleak.VerifyNone(t)
	now, _, mem, _, _ := MemstorePair(t)
	// The store holds every acquire until gate closes (or its ctx ends),
	// telling entered when one arrives.
	store := faultstore.New(mem)
	mine, err := store.Instance("mine", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	store.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op != faultstore.OpAcquire {
			return nil
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	s := New(mine, Options{
		Planner:     NewPlanner(Config{Interval: time.Second}, 1),
		Now:         now,
		CallTimeout: time.Minute,
	})
	tn, err := s.Track("a", quota.Quota{Rate: 10, Burst: 10, MinLease: 5, MaxLease: 5, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Refill(context.Background(), tn, 5)
	<-entered
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !s.closing() {
		if time.Now().After(deadline) {
			t.Fatal("Close did not begin within 10s")
		}
		time.Sleep(time.Millisecond) // polling; the deadline bounds it
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a refill's call was in flight")
	case r := <-ch:
		t.Fatalf("the refill answered %v while its call was held", r.Err)
	default:
	}
	close(gate)
	<-closed
	if r := <-ch; r.Err != nil {
		t.Fatalf("the refill: %v, want its grant", r.Err)
	}
	if n := tn.tokens.Load(); n != 5 {
		t.Fatalf("after Close, the lease holds %d tokens, want the 5 granted", n)
	}
	if err := s.ReleaseAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Returned+st.Forfeited != 5 {
		t.Errorf("stats %+v: want the 5 tokens given back", st)
	}
}
