package bucket_test

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/bucket"
)

// TestNoAllocations: the package promises that no method allocates.
func TestNoAllocations(t *testing.T) {
	var c bucket.Counter
	c.Add(1 << 40)
	b := bucket.NewTokenBucket(t0, 1e12, 1e9)
	d := bucket.Demand{HalfLife: time.Second}
	now := t0
	d.Observe(now, 0)

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
		{"TokenBucket.Available", func() {
			now = now.Add(time.Microsecond)
			sink += b.Available(now)
		}},
		{"Demand.Observe", func() {
			now = now.Add(time.Millisecond)
			d.Observe(now, 3)
		}},
		{"Demand.Rate", func() {
			now = now.Add(time.Millisecond)
			sink += d.Rate(now)
		}},
	}
	for _, tc := range cases {
		if got := testing.AllocsPerRun(1000, tc.f); got != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tc.name, got)
		}
	}
	if sink <= 0 {
		t.Errorf("Available/Rate returned nothing positive (sink %v)", sink)
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

func BenchmarkDemandObserve(b *testing.B) {
	b.ReportAllocs()
	d := bucket.Demand{HalfLife: time.Second}
	now := t0
	d.Observe(now, 0)
	for b.Loop() {
		now = now.Add(time.Millisecond)
		d.Observe(now, 5)
	}
	if r := d.Rate(now); r <= 0 {
		b.Fatalf("Rate = %v after observing 5000/s", r)
	}
}
