package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// TestReservationStopsWhenSetQuotaLowersTheRate: a Limiter whose tenant
// holds reserved tokens still to come (WithReservation, over-demanded at
// a rate of 1,000 a second) admits, after SetQuota lowers the rate to 10,
// no more than the bound after a change allows (docs/design.md, "Quotas
// set at run time"): Burst + Rate*T of the new quota, plus what it held of
// grants before (2 MaxLease of the old quota, and a request's tokens) and
// what came due before it read the change. The reserved tokens came due
// at the old pace until they ran out: 825 to 838 admitted where 261 are allowed.
func TestReservationStopsWhenSetQuotaLowersTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := NewWithStore(memstore.New(), WithReservation(4*time.Second), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
			WithDefaultQuota(Quota{Rate: 1000, Burst: 100}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		var seen Quota // the quota in force at the last admission
		burst := func() (admitted int64) {
			for range 30 {
				if d := l.AllowN(ctx, "a", 1); d.Allowed && d.Mode == FailDefault {
					admitted++
					seen = d.Quota
				}
			}
			time.Sleep(10 * time.Millisecond) // 3,000 requests a second
			synctest.Wait()
			return admitted
		}
		deadline := time.Now().Add(time.Minute)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("no reserved tokens to come after a minute of over-demand: %+v", l.sync.Stats())
			}
			burst()
			if st := l.sync.Stats(); st.Reserved-st.Dripped >= 200 {
				break
			}
		}
		old := seen
		if old.Rate != 1000 {
			t.Fatalf("quota in force %+v, want the default", old)
		}
		newQ := Quota{Rate: 10, Burst: 10}
		if err := l.SetQuota(ctx, "a", newQ); err != nil {
			t.Fatal(err)
		}
		changed := time.Now()
		var admitted int64
		for time.Since(changed) < 5*time.Second {
			admitted += burst()
		}
		st := l.sync.Stats()
		// Plus what came due at the old rate before the limiter read the
		// change: half an interval and two rounds (docs/design.md), a
		// tenth of a second here.
		allowed := float64(newQ.Burst) + newQ.Rate*time.Since(changed).Seconds() + 2*float64(old.MaxLease) + 1 + old.Rate*0.1
		t.Logf("admitted %d in the %v after the rate went from 1,000 to 10 (the bound after a change allows %.0f); reserved %d, came due %d",
			admitted, time.Since(changed), allowed, st.Reserved, st.Dripped)
		if float64(admitted) > allowed {
			t.Errorf("admitted %d in the %v after the rate went to 10 a second; the bound after a change allows %.0f", admitted, time.Since(changed), allowed)
		}
	})
}
