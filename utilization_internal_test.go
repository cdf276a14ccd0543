package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/telemetry"
)

// TestUtilizationCountsTokensSpent: the utilization gauge reads the
// tokens spent by requests. Reserved tokens not yet come due
// (WithReservation) are granted but neither held nor spent; they counted
// as spent (granted - returned - forfeited - held), so a limiter whose
// requests had stopped reported more spent than they spent. A rate
// share's tokens (WithRateShares) come due here without a grant: spent,
// they counted as nothing, and expired (forfeited) they came off the
// tokens spent.
func TestUtilizationCountsTokensSpent(t *testing.T) {
	for name, opt := range map[string]Option{
		"reservation": WithReservation(2 * time.Second),
		"rate share":  WithRateShares(time.Second, 0),
	} {
		t.Run(name, func(t *testing.T) { utilizationCountsTokensSpent(t, opt) })
	}
}

func utilizationCountsTokensSpent(t *testing.T, opt Option) {
	synctest.Test(t, func(t *testing.T) {
		l, err := NewWithStore(memstore.New(), opt,
			WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
			WithDefaultQuota(Quota{Rate: 20, Burst: 20}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		var spent int64 // tokens admitted from leases
		deadline := time.Now().Add(time.Minute)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("no reserved or shared tokens after a minute of over-demand: %+v", l.sync.Stats())
			}
			for range 4 {
				if d := l.AllowN(ctx, "a", 1); d.Allowed && d.Mode == FailDefault {
					spent++
				}
			}
			time.Sleep(10 * time.Millisecond) // 400 requests a second against a rate of 20
			synctest.Wait()
			if st := l.sync.Stats(); st.Reserved != st.Dripped {
				break
			}
		}
		var s telemetry.Snapshot
		l.collect(&s)
		st := l.sync.Stats()
		if s.TokensSpent != spent {
			t.Errorf("utilization's spent tokens %d, requests spent %d (granted %d, of which reserved %d, dripped %d; returned %d, forfeited %d)",
				s.TokensSpent, spent, st.Granted, st.Reserved, st.Dripped, st.Returned, st.Forfeited)
		}
	})
}
