package bucket_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/leasequota/leasequota/bucket"
)

// TestNoAllocations: the package promises that no method allocates but
// Stripe, and that one only its slots.
func TestNoAllocations(t *testing.T) {
	var c bucket.Counter
	c.Add(1 << 40)
	var split bucket.Counter
	split.Add(1 << 40)
	split.Stripe(4)
	b := bucket.NewTokenBucket(t0, 1e12, 1e9)
	now := t0

	var sink float64
	cases := []struct {
		name string
		f    func()
	}{
		{"Counter.TrySpend", func() { c.TrySpend(1) }},
		{"Counter.Add", func() { c.Add(1) }},
		{"Counter.Take", func() { c.Take(1) }},
		{"TokenBucket.TryConsume", func() {
			now = now.Add(time.Microsecond)
			b.TryConsume(now, 1)
		}},
		{"TokenBucket.Delay", func() {
			now = now.Add(time.Microsecond)
			d, _ := b.Delay(now, 1)
			sink += float64(d) + 1
		}},
		{"TokenBucket.SetRate", func() {
			now = now.Add(time.Microsecond)
			b.SetRate(now, 1e9)
		}},
		{"UpdateRate", func() { sink += bucket.UpdateRate(sink, 3, time.Millisecond, time.Second) }},
		{"split Counter.TrySpend", func() { split.TrySpend(1) }},
		{"split Counter.TrySpendSlots", func() { split.TrySpendSlots(3) }},
		{"split Counter.Spread", func() { split.Spread() }},
		{"split Counter.Homes", func() { split.Homes(1) }},
		{"split Counter.Take", func() { split.Take(1) }},
		{"split Counter.Restore", func() { split.Restore() }},
	}
	for _, tc := range cases {
		if got := testing.AllocsPerRun(1000, tc.f); got != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tc.name, got)
		}
	}
	if sink <= 0 {
		t.Errorf("Delay/UpdateRate returned nothing positive (sink %v)", sink)
	}
	// A split and a join: the slots and the pointer to them, then nothing.
	if got := testing.AllocsPerRun(1000, func() { split.Stripe(8); split.Stripe(1) }); got != 2 {
		t.Errorf("Stripe(8) then Stripe(1): %v allocations per run, want 2", got)
	}
}

func BenchmarkCounterTrySpend(b *testing.B) {
	b.ReportAllocs()
	var c bucket.Counter
	c.Add(1 << 62)
	for b.Loop() {
		if ok, _ := c.TrySpend(1); !ok {
			b.Fatal("TrySpend failed")
		}
	}
}

func BenchmarkCounterTrySpendParallel(b *testing.B) {
	b.ReportAllocs()
	var c bucket.Counter
	c.Add(1 << 62)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if ok, _ := c.TrySpend(1); !ok {
				b.Error("TrySpend failed")
				return
			}
		}
	})
}

// BenchmarkCounterTrySpendSplit is BenchmarkCounterTrySpend on a counter
// split into a slot per P (Stripe, Spread), and ...SplitParallel
// BenchmarkCounterTrySpendParallel on it: each goroutine spends from the
// slot of its P.
func BenchmarkCounterTrySpendSplit(b *testing.B) {
	b.ReportAllocs()
	c := splitCounter()
	for b.Loop() {
		if ok, _ := c.TrySpend(1); !ok {
			b.Fatal("TrySpend failed")
		}
	}
}

func BenchmarkCounterTrySpendSplitParallel(b *testing.B) {
	b.ReportAllocs()
	c := splitCounter()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if ok, _ := c.TrySpend(1); !ok {
				b.Error("TrySpend failed")
				return
			}
		}
	})
}

func splitCounter() *bucket.Counter {
	c := new(bucket.Counter)
	c.Stripe(runtime.GOMAXPROCS(0))
	c.Add(1 << 62)
	c.Spread()
	return c
}

func BenchmarkTokenBucketTryConsume(b *testing.B) {
	b.ReportAllocs()
	tb := bucket.NewTokenBucket(t0, 1e6, 1e9) // refills 1000 per µs
	now := t0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if !tb.TryConsume(now, 1) {
			b.Fatal("TryConsume failed")
		}
	}
}
