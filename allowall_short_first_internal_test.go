package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/syncer"
)

// TestAllowAllLooksBeforeItSpends: a pass of AllowAll takes the first
// key whose lease visibly holds fewer than n tokens (or whose burst is
// below n) as short before it spends from any key (visiblyShort), and
// passes over the key whose turn admitted and the keys their failure
// mode admitted. It used to spend from the keys before the short one and
// give the tokens back; a give-back is exact only while the key's lease
// stands as it was at the spend (giveBack), and in grpcquota's
// TestPoliciesNothingSpentWhenDenied a plan that ran in between sent the
// peer policy's token back to Redis, once in some hundreds of runs: the
// key, its bucket known dry and refilling at 0.01/s, denied its next
// request.
func TestAllowAllLooksBeforeItSpends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quota := func(name string) Quota {
			if name == "short" {
				return Quota{Rate: 0.01, Burst: 1}
			}
			return Quota{Rate: 100, Burst: 100}
		}
		l, err := NewWithStore(memstore.New(), WithQuotaFunc(quota), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		for _, k := range []string{"a", "short"} {
			if !l.Allow(k) {
				t.Fatalf("%s: first request denied", k)
			}
		}
		synctest.Wait()
		a, short := l.sync.Tenant("a"), l.sync.Tenant("short")
		if a.Held() < 2 || short.Held() != 0 {
			t.Fatalf("a holds %d tokens, short %d: want at least 2, and 0", a.Held(), short.Held())
		}
		ts := []*syncer.Tenant{a, short}
		for _, c := range []struct {
			what   string
			byMode []bool
			held   int
			n      int64
			want   int
		}{
			{"short holds none", []bool{false, false}, -1, 1, 1},
			{"short's turn admitted", []bool{false, false}, 1, 1, -1},
			{"short admitted by its failure mode", []bool{false, true}, -1, 1, -1},
			{"n above a's holding", []bool{false, false}, 1, a.Held() + 1, 0},
			{"n above a's burst, a's turn admitted", []bool{false, false}, 0, 101, 1},
		} {
			if got := visiblyShort(ts, c.byMode, c.held, c.n); got != c.want {
				t.Errorf("%s: visiblyShort = %d, want %d", c.what, got, c.want)
			}
		}

		// A denial by short leaves a's tokens where they were, whatever a
		// plan does meanwhile: none was taken.
		before, held := l.Stats(), a.Held()
		d := l.AllowAll(context.Background(), 1, "a", "short")
		if d.Allowed || d.Tenant != "short" {
			t.Fatalf("AllowAll: allowed %v, decided by %q (%v); want denied by short", d.Allowed, d.Tenant, d.Reason)
		}
		after := l.Stats()
		if got := after.Forfeited - before.Forfeited + after.Returned - before.Returned; got != 0 || a.Held() != held {
			t.Errorf("AllowAll denied by short: a holds %d tokens (%d before), %d forfeited or returned", a.Held(), held, got)
		}
	})
}
