package syncer

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestGiveBackDuringDrain: a multi-tenant decision spent 2 of a lease's
// 5 tokens and gives them back without the tenant's lock (UnspendAt, as
// the root's giveBack does while the oldest grant is unchanged); an
// eviction's drain, or Close's (ReleaseAll), runs after the give-back's
// check. Checked, then added outside any bracket, the 2 tokens landed in
// the drained counter: released 3 of the 5, returned and forfeited
// nothing of the other 2, which two later spends of the evicted tenant
// took, admissions LeaseTotals never counted. Now the drain waits for the
// give-back (Tenant.quiesce): all 5 are released or forfeited, and the
// counter stays empty. The test holds the give-back between its check
// and its add (unspendBegin, unspendEnd) while the drain runs in a
// goroutine, and goes on when the drain either waits for it (the tenant
// is marked drained) or has emptied the counter.
func TestGiveBackDuringDrain(t *testing.T) {
	for _, how := range []string{"evict", "close"} {
		t.Run(how, func(t *testing.T) {
			now, _, _, mine, _ := MemstorePair(t)
			s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
			defer s.Close()
			q := quota.Quota{Rate: 0.001, Burst: 5, MinLease: 5, MaxLease: 5, LeaseTTL: time.Hour}
			tn, err := s.Track("x", q)
			if err != nil {
				t.Fatal(err)
			}
			refillNow(t, s, tn, 5)
			front := tn.Front()
			if front == 0 {
				t.Fatal("the lease's grant is unknown")
			}
			if ok, _ := tn.SpendWaited(2); !ok {
				t.Fatal("the spend of 2 failed")
			}
			if !tn.unspendBegin(front) {
				t.Fatal("the give-back's check failed before any drain")
			}
			done := make(chan int64, 1)
			go func() {
				var released int64
				if how == "evict" {
					for _, r := range s.evict([]*Tenant{tn}, now(), nil) {
						released += r.Amount
					}
				} else {
					s.Close()
					if err := s.ReleaseAll(context.Background()); err != nil {
						t.Error(err)
					}
					released = s.Stats().Returned
				}
				done <- released
			}()
			// Until the drain waits for the give-back (it marked the
			// tenant, flagDrained, and waits for the brackets under way),
			// or has emptied the counter (its 3 tokens) between the check
			// and the add.
			drained := false
			for !tn.flag(flagDrained) {
				if tn.Held() == 0 {
					drained = true
					break
				}
				runtime.Gosched()
			}
			tn.unspendEnd(2, true)
			released := <-done
			if drained {
				t.Errorf("the drain ran between the give-back's check and its add")
			}
			if tn.UnspendAt(1, front) {
				t.Error("a give-back after the drain was taken")
			}
			spent := 0
			for {
				if ok, _ := tn.Spend(1); !ok {
					break
				}
				spent++
			}
			st := s.Stats()
			admitted, held := s.LeaseTotals()
			t.Logf("released %d, forfeited %d, later spends %d, LeaseTotals admitted %d held %d", released, st.Forfeited, spent, admitted, held)
			if released+st.Forfeited != 5 {
				t.Errorf("%d tokens released and %d forfeited of the 5 granted, none admitted", released, st.Forfeited)
			}
			if spent != 0 || tn.Held() != 0 {
				t.Errorf("the drained tenant's counter held %d tokens after the drain, %d of them spent", int64(spent)+tn.Held(), spent)
			}
			if admitted != int64(spent) {
				t.Errorf("LeaseTotals counts %d admissions of the %d made", admitted, spent)
			}
		})
	}
}

// TestSplitSpendDuringDrain: a spend of n > 1 from a counter split into
// 64 slots gathers its tokens slot by slot, holding them in no count, and
// a drain that runs meanwhile misses them; when the spend falls short it
// puts them back (slot.back). The drain of an evicted tenant or of Close
// then left them in the counter, neither returned nor forfeited. Now a
// drain waits for the spends under way, and a spend after its mark takes
// nothing (flagDrained): drained and spent make the tokens put in, and
// the counter stays empty. A spender on another P (busy-waiting for each
// round, as TestPutBackAfterEmptied's in the bucket package) races each
// drain, for 2 s or until 200 spends went through; the test fails at the
// first drain that leaves a token behind.
func TestSplitSpendDuringDrain(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	const total = 64 * 4
	var (
		cur       atomic.Pointer[Tenant]
		gen, done atomic.Int64 // rounds started by the test, ended by the spender
		spent     atomic.Int64
	)
	go func() {
		for g := int64(1); ; g++ {
			for gen.Load() < g {
				if gen.Load() < 0 {
					return
				}
			}
			if ok, _ := cur.Load().SpendWaited(total - 1); ok {
				spent.Store(total - 1)
			}
			done.Store(g)
		}
	}()
	defer gen.Store(-1)
	deadline := time.Now().Add(2 * time.Second)
	var iters, through int
	for i := int64(1); time.Now().Before(deadline) && through < 200; i++ {
		iters++
		tn := new(Tenant)
		tn.credit(total)
		tn.restripe(64)
		cur.Store(tn)
		spent.Store(0)
		gen.Store(i)
		for j := 0; j < int(i%64)*8; j++ {
			_ = tn.tokens.Slots() // let the spender start gathering
		}
		tn.quiesce()
		drained := tn.drain()
		for done.Load() < i {
		}
		left := tn.Held()
		if drained+spent.Load() != total || left != 0 {
			t.Fatalf("iteration %d: %d drained + %d spent of %d; %d left in the drained counter", i, drained, spent.Load(), total, left)
		}
		if spent.Load() != 0 {
			through++
		}
	}
	t.Logf("%d iterations, %d spends before the drain", iters, through)
}
