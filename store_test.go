package leasequota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

var _ leasequota.Backend = (*memstore.Store)(nil)

// TestNewWithStore runs two Limiters on one in-process store: they share
// the tenant's global bucket as two instances on one Redis do.
func TestNewWithStore(t *testing.T) {
	store := memstore.New()
	q := leasequota.Quota{Rate: 0.001, Burst: 100}
	var ls []*leasequota.Limiter
	for range 2 {
		l, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(q), leasequota.WithLogger(testLogger(t)),
			leasequota.WithColdStartWait(5*time.Second), leasequota.WithMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		ls = append(ls, l)
	}
	// Each limiter asks until its first denial: the other's unspent
	// lease is all the bucket has left then.
	admitted := 0
	for i := 0; i < 300; i++ {
		l := ls[i%2]
		if l == nil {
			continue
		}
		d := l.AllowN(context.Background(), "acme", 1)
		if !d.Allowed {
			if d.Reason != leasequota.ReasonExhausted {
				t.Fatalf("request %d denied with %v, want ReasonExhausted", i, d.Reason)
			}
			ls[i%2] = nil
			continue
		}
		admitted++
	}
	// Rate is 1 token per 1000 s: the burst is all there is, and the
	// limiters wait for refills until the bucket is dry.
	if admitted > 100 || admitted < 95 {
		t.Fatalf("admitted %d until each was denied, over two limiters sharing a burst of 100: want 90..100", admitted)
	}
	t.Logf("admitted %d until each was denied, over two limiters sharing a burst of 100", admitted)
}

func TestNewWithStoreBadInput(t *testing.T) {
	if _, err := leasequota.NewWithStore(nil); !errors.Is(err, leasequota.ErrInvalidOption) {
		t.Fatalf("NewWithStore(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := leasequota.NewWithStore(memstore.New(), leasequota.WithRefreshInterval(-1)); !errors.Is(err, leasequota.ErrInvalidOption) {
		t.Fatalf("NewWithStore with a negative interval: %v, want ErrInvalidOption", err)
	}
}
