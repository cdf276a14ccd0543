package lease

import (
	"errors"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/internal/rateshare"
)

// drawShares draws a model's params (the rate, the burst and the epochs)
// and a bucket of them with shares in force: tokens at its time at, within
// its epoch, as rateshare's Bucket would hold them.
func drawShares(rt *rapid.T) (rateshare.Params, rateshare.Bucket, Shares) {
	p := rateshare.Params{
		Rate:   rapid.Float64Range(0.5, 1e6).Draw(rt, "rate"),
		Burst:  float64(rapid.Int64Range(1, 1e6).Draw(rt, "burst")),
		Period: time.Duration(rapid.Int64Range(1000, 30e6).Draw(rt, "period µs")) * time.Microsecond,
		Hold:   time.Second,
	}
	p.Phase = time.Duration(rapid.Int64Range(0, p.Period.Microseconds()-1).Draw(rt, "phase µs")) * time.Microsecond
	at := rapid.Int64Range(1_700_000_000_000_000, 1_900_000_000_000_000).Draw(rt, "at")
	b := rateshare.Bucket{
		Tokens:    rapid.Float64Range(0, p.Burst).Draw(rt, "tokens"),
		At:        at,
		Epoch:     p.EpochOf(at),
		Committed: rapid.Float64Range(0, 2*p.Rate).Draw(rt, "committed"),
	}
	b.Booked = b.Committed * rapid.Float64Range(0, 1).Draw(rt, "booked part")
	if rapid.Bool().Draw(rt, "none booked") {
		b.Booked = 0
	}
	sh := Shares{Epoch: b.Epoch, Committed: b.Committed, Booked: b.Booked, Period: p.Period.Microseconds(), Phase: p.Phase.Microseconds()}
	return p, b, sh
}

// TestRefillSharesIsTheModel holds RefillShares, the scripts' refill in
// Go, to internal/rateshare's Bucket, the model whose bound is a property
// test: the same level, to the bit, and the same shares in force, over
// random buckets and times up to three periods on.
func TestRefillSharesIsTheModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p, b, sh := drawShares(rt)
		to := b.At + rapid.Int64Range(1, 3*sh.Period).Draw(rt, "elapsed")
		if err := sh.Validate(); err != nil {
			rt.Fatalf("drawn shares: %v", err)
		}
		got, after := RefillShares(b.Tokens, b.At, to, p.Rate, int64(p.Burst), sh)
		want := b.Level(p, to)
		if got != want {
			rt.Fatalf("RefillShares = %v, the model's level %v", got, want)
		}
		if after.InForce() != (b.Committed > 0 || b.Booked > 0) {
			rt.Fatalf("RefillShares leaves %+v in force, the model %v and %v", after, b.Committed, b.Booked)
		}
		if after.InForce() && (after.Epoch != b.Epoch || after.Committed != b.Committed || after.Booked != b.Booked) {
			rt.Fatalf("RefillShares leaves %+v, the model epoch %d, %v and %v", after, b.Epoch, b.Committed, b.Booked)
		}
		// Going in two steps is going in one: what a bucket called at a
		// time between reads as the same.
		mid := b.At + rapid.Int64Range(0, to-b.At).Draw(rt, "mid")
		l1, s1 := RefillShares(b.Tokens, b.At, mid, p.Rate, int64(p.Burst), sh)
		if l2, s2 := RefillShares(l1, mid, to, p.Rate, int64(p.Burst), s1); l2 != got && math.Abs(l2-got) > 1e-9*max(1, got) || s2 != after {
			rt.Fatalf("in two steps via %d: %v %+v, in one %v %+v", mid, l2, s2, got, after)
		}
	})
}

// TestSettledIsTheModel: Settled is when the model's ExpireAt counts the
// refill to Burst from, with the level then.
func TestSettledIsTheModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p, b, sh := drawShares(rt)
		at, level := Settled(b.Tokens, b.At, p.Rate, int64(p.Burst), sh)
		c := b
		want := c.ExpireAt(p)
		if got := at + int64(math.Ceil((p.Burst-level)/p.Rate*1e6)); got != want {
			rt.Fatalf("Settled = %d, level %v: expires at %d, the model at %d", at, level, got, want)
		}
		if after, left := RefillShares(b.Tokens, b.At, at, p.Rate, int64(p.Burst), sh); after != level || left.InForce() {
			rt.Fatalf("at %d RefillShares = %v with %+v in force, Settled's level %v", at, after, left, level)
		}
	})
}

func TestSharesUnit(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	// Epochs of 10 s from 3 s: epoch 0 is [3 s, 13 s).
	sh := Shares{Epoch: 0, Committed: 60, Booked: 20, Period: 10 * s, Phase: 3 * s}
	// 4 s to 13 s at 40/s, 13 s to 23 s at 80/s (20 booked), then 100/s.
	for _, c := range []struct {
		to   int64
		want float64
		left Shares
	}{
		{5 * s, 40, sh},
		{13 * s, 360, Shares{Epoch: 1, Committed: 20, Period: 10 * s, Phase: 3 * s}},
		{14 * s, 440, Shares{Epoch: 1, Committed: 20, Period: 10 * s, Phase: 3 * s}},
		{23 * s, 1160, Shares{}},
		{25 * s, 1360, Shares{}},
	} {
		got, left := RefillShares(0, 4*s, c.to, 100, 1e6, sh)
		if got != c.want || left != c.left {
			t.Errorf("RefillShares to %d s = %v, %+v; want %v, %+v", c.to/s, got, left, c.want, c.left)
		}
	}
	// Capped at the burst along the way, and at 0 a second when the
	// shares pass the rate (the quota lowered under them).
	if got, _ := RefillShares(0, 4*s, 25*s, 100, 500, sh); got != 500 {
		t.Errorf("capped: %v, want 500", got)
	}
	if got, _ := RefillShares(7, 4*s, 12*s, 50, 500, sh); got != 7 {
		t.Errorf("shares above the rate: %v, want 7 (no refill)", got)
	}
	// A record older than the bucket's time (a client that does not
	// honour shares wrote the bucket at 30 s): nothing for the epochs it
	// missed, the whole rate after.
	if got, left := RefillShares(0, 30*s, 31*s, 100, 1e6, sh); got != 100 || left != (Shares{}) {
		t.Errorf("stale record: %v, %+v; want 100, none", got, left)
	}
	if at, level := Settled(0, 4*s, 100, 1e6, sh); at != 23*s || level != 1160 {
		t.Errorf("Settled = %d, %v; want 23 s, 1160", at, level)
	}
	if at, level := Settled(5, 4*s, 100, 1e6, Shares{}); at != 4*s || level != 5 {
		t.Errorf("Settled with none = %d, %v; want its time and level", at, level)
	}
}

func TestParseShares(t *testing.T) {
	sh := Shares{Epoch: 180000, Committed: 12.5, Booked: 0.1, Period: 10_000_000, Phase: 1234}
	if v := sh.String(); v != "180000:12.5:0.10000000000000001:10000000:1234" {
		t.Errorf("String = %q", v)
	}
	if got, err := ParseShares(sh.String()); err != nil || got != sh {
		t.Errorf("ParseShares(String) = %+v, %v; want %+v", got, err, sh)
	}
	for _, v := range []string{
		"", "1:2:3:4", "1:2:1:10000:0:9", "x:1:0:10000:0", "1:NaN:0:10000:0", "1:+Inf:0:10000:0",
		"1:-1:0:10000:0", "1:1:2:10000:0", "1:1:-0.5:10000:0", "1:1:0:999:0", "1:1:0:10000:10000",
		"1:1:0:10000:-1", "1:1:0:1.5e4:0", "9007199254740991:1:0:10000:0", "1:1:0:9007199254740993:0",
	} {
		if _, err := ParseShares(v); !errors.Is(err, ErrBadShares) {
			t.Errorf("ParseShares(%q) = %v, want ErrBadShares", v, err)
		}
	}
}
