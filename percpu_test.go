package leasequota_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestPerCPUTokens spends a hot tenant's tokens from goroutines on every P
// with WithPerCPUTokens: the tenant's tokens are split into slots, every
// admission is counted once, no more tokens are spent than the store
// granted, and a cold tenant beside it stays one count.
func TestPerCPUTokens(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	store := setup(t)
	l := newLimiter(t, store,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e6, Burst: 1e5}),
		leasequota.WithPerCPUTokens(1_000))
	ctx := context.Background()
	if !l.Allow("cold") {
		t.Fatal("cold tenant's first request denied")
	}
	var allowed, tokens atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	split := func() bool { info, _ := l.Tenant("hot"); return info.Slots > 1 }
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline) && (i < 20_000 || !split()); i++ {
				n := int64(1 + g%2) // Allow, and AllowN of 2
				ok := false
				if n == 1 {
					ok = l.Allow("hot")
				} else {
					ok = l.AllowN(ctx, "hot", n).Allowed
				}
				if ok {
					allowed.Add(1)
					tokens.Add(n)
				}
			}
		})
	}
	wg.Wait()
	info, _ := l.Tenant("hot")
	if info.Slots < 2 {
		t.Fatalf("hot tenant (demand %.0f/s) not split: %d slots", info.Demand, info.Slots)
	}
	if info, _ := l.Tenant("cold"); info.Slots != 0 {
		t.Errorf("cold tenant split into %d slots", info.Slots)
	}
	st := l.Stats()
	if got := st.Admitted(); got != allowed.Load()+1 {
		t.Errorf("Stats().Admitted() = %d, want the %d admissions made", got, allowed.Load()+1)
	}
	if spent := tokens.Load() + 1; spent > st.Granted {
		t.Errorf("%d tokens spent, more than the %d granted", spent, st.Granted)
	}
	t.Logf("%d admissions, %d tokens, %d slots, %d granted", allowed.Load(), tokens.Load(), info.Slots, st.Granted)
}

// TestWithPerCPUTokensBadInput checks that a demand that is negative,
// under one request a second, NaN or infinite is refused by name.
func TestWithPerCPUTokensBadInput(t *testing.T) {
	q := leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10})
	for _, d := range []float64{-1, 0.5, math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := leasequota.NewWithStore(memstore.New(), q, leasequota.WithPerCPUTokens(d))
		if !errors.Is(err, leasequota.ErrInvalidOption) || !strings.Contains(err.Error(), "WithPerCPUTokens") {
			t.Errorf("WithPerCPUTokens(%v): %v, want ErrInvalidOption naming it", d, err)
		}
	}
	for _, d := range []float64{0, 1, 5e4} {
		l, err := leasequota.NewWithStore(memstore.New(), q, leasequota.WithPerCPUTokens(d), leasequota.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("WithPerCPUTokens(%v): %v", d, err)
		}
		l.Close(context.Background())
	}
}

// TestPerCPUTokensOneGoroutine spends a hot tenant from one goroutine
// with the default options: its demand splits its counter (the default
// is on, at DefaultPerCPUDemand), and the syncer joins it again once it
// finds the slots spent from one P alone, while the goroutine goes on.
func TestPerCPUTokensOneGoroutine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e6, Burst: 1e5}))
	slots := func() int { info, _ := l.Tenant("hot"); return info.Slots }
	deadline := time.Now().Add(20 * time.Second)
	split, joined := false, false
	for i := 0; !joined && time.Now().Before(deadline); i++ {
		l.Allow("hot")
		if i%1024 == 0 {
			n := slots()
			split = split || n > 1
			joined = split && n == 0
		}
	}
	info, _ := l.Tenant("hot")
	if !split {
		t.Fatalf("hot tenant (demand %.0f/s, default DefaultPerCPUDemand %d) never split", info.Demand, leasequota.DefaultPerCPUDemand)
	}
	if !joined {
		t.Fatalf("hot tenant spent from one goroutine still split into %d slots after 20 s", info.Slots)
	}
	t.Logf("demand %.0f/s, split, then joined", info.Demand)
}

// TestPerCPUTokensOff spends a hot tenant from goroutines on every P with
// WithPerCPUTokens(0): its counter stays one count.
func TestPerCPUTokensOff(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	store := setup(t)
	l := newLimiter(t, store,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e6, Burst: 1e5}),
		leasequota.WithPerCPUTokens(0))
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	var most atomic.Int64
	for range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				l.Allow("hot")
				if i%1024 == 0 {
					info, _ := l.Tenant("hot")
					most.Store(max(most.Load(), int64(info.Slots)))
				}
			}
		})
	}
	wg.Wait()
	info, _ := l.Tenant("hot")
	if most.Load() != 0 || info.Slots != 0 {
		t.Fatalf("WithPerCPUTokens(0): hot tenant (demand %.0f/s) split into %d slots", info.Demand, most.Load())
	}
	if info.Demand < leasequota.DefaultPerCPUDemand {
		t.Fatalf("demand %.0f/s, under DefaultPerCPUDemand: the test shows nothing", info.Demand)
	}
}
