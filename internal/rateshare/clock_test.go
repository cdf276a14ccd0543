package rateshare

import (
	"testing"

	"pgregory.net/rapid"
)

// TestLocalWindowWithinTheShare: whatever the offset between the
// instance's clock and the store's, the delays each way and the clocks'
// rates (within the drift given), the window LocalWindow gives, taken
// back to the store's clock, lies within the share's [From, Until).
func TestLocalWindowWithinTheShare(t *testing.T) {
	const drift = 1e-4
	rapid.Check(t, func(rt *rapid.T) {
		// Real time is the store's clock. The instance's clock reads
		// offset + (1+skew)*real, skew within the drift.
		offset := rapid.Int64Range(-1e12, 1e12).Draw(rt, "offset")
		skew := rapid.Float64Range(-drift, drift).Draw(rt, "skew")
		local := func(real int64) int64 { return offset + int64(float64(real)*(1+skew)) }
		toStore := func(l int64) float64 { return float64(l-offset) / (1 + skew) }

		sentReal := rapid.Int64Range(0, 1e9).Draw(rt, "sent")
		storeNow := sentReal + rapid.Int64Range(0, 5e6).Draw(rt, "to store")
		arrivedReal := storeNow + rapid.Int64Range(0, 5e6).Draw(rt, "back")
		// The share starts at the store's time of the call, or up to a
		// second after it (a bucket frozen by reservations).
		start := storeNow + rapid.Int64Range(0, 1e6).Draw(rt, "lead")
		sh := Share{Rate: 10, From: start, Until: start + rapid.Int64Range(0, 30e6).Draw(rt, "span")}

		from, until := LocalWindow(local(sentReal), local(arrivedReal), storeNow, sh, drift)
		if until < from {
			rt.Fatalf("window [%d, %d) ends before it starts", from, until)
		}
		if from == until {
			return // empty: nothing accrues
		}
		// One µs of slack each way for the rounding of local().
		if f := toStore(from); f < float64(sh.From)-1 {
			rt.Fatalf("accrual starts at store time %.0f, before the share's From %d", f, sh.From)
		}
		if u := toStore(until); u > float64(sh.Until)+1 {
			rt.Fatalf("accrual ends at store time %.0f, after the share's Until %d", u, sh.Until)
		}
	})
}

func TestLocalWindowEdges(t *testing.T) {
	sh := Share{Rate: 5, From: 100, Until: 10_100}
	if from, until := LocalWindow(0, 50, 100, sh, 0); from != 50 || until != 9_999 {
		t.Errorf("a round trip of 50: window [%d, %d), want [50, 9999)", from, until)
	}
	// A reply slower than the share is long: empty.
	if from, until := LocalWindow(0, 20_000, 100, sh, 0); from != until {
		t.Errorf("a reply after the share ended: window [%d, %d), want empty", from, until)
	}
	// No share, or a reply that arrived before it was sent: empty.
	for _, c := range []struct {
		sent, arrived int64
		sh            Share
	}{{0, 50, Share{}}, {60, 50, sh}} {
		if from, until := LocalWindow(c.sent, c.arrived, 100, c.sh, 0); from != until {
			t.Errorf("LocalWindow(%d, %d, %+v): [%d, %d), want empty", c.sent, c.arrived, c.sh, from, until)
		}
	}
}
