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
