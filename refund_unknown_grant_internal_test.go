package leasequota

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// TestRefundOfAnUnknownGrantCounts: a refund of tokens spent from a
// lease whose grant is unknown (Tenant.Front zero: a rate share's tokens,
// WithRateShares) is forfeited, as Refund says, and counted: refunded and
// forfeited (Stats.Refunded counts every token refunded). Refund took a
// zero front for a tenant its failure mode admitted and returned at once:
// nil, and nothing counted; with rate shares in force, most admissions
// (1,736 of 2,054 in this shape) were of such tokens.
func TestRefundOfAnUnknownGrantCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		var ls []*Limiter
		for i := range 4 {
			l, err := NewWithStore(store, WithDefaultQuota(Quota{Rate: 100, Burst: 100}), WithInstanceID(fmt.Sprint(i)),
				WithSeed(uint64(i+1)), WithLogger(slog.New(slog.DiscardHandler)), WithRateShares(time.Second, 0.1))
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
			defer l.Close(context.Background())
		}
		start := time.Now()
		for time.Since(start) < 20*time.Second {
			time.Sleep(10 * time.Millisecond)
			for _, l := range ls {
				d := l.AllowN(context.Background(), "t", 1)
				if !d.Allowed || d.adm.n == 0 || d.adm.front[0] != 0 || time.Since(start) < 5*time.Second {
					continue
				}
				before := l.Stats()
				if err := l.Refund(&d); err != nil {
					t.Fatalf("Refund of a leased token: %v", err)
				}
				after := l.Stats()
				if after.Refunded-before.Refunded != 1 || after.Forfeited-before.Forfeited != 1 {
					t.Errorf("Refund of a token of an unknown grant: Refunded %d -> %d, Forfeited %d -> %d; want each one more",
						before.Refunded, after.Refunded, before.Forfeited, after.Forfeited)
				}
				return
			}
		}
		t.Fatal("no admission of a token of an unknown grant in 20 s")
	})
}
