package bucket_test

import (
	"testing"

	"github.com/leasequota/leasequota/bucket"
)

// TestSlotsArePairsOfLinesApart: each slot of a split counter, for every
// count of slots Stripe makes, starts on a 128-byte boundary of its own,
// so that no two slots share an aligned pair of cache lines, which x86
// processors may move between CPUs together (docs/performance.md, "Slots
// a line pair apart": with 64-byte slots, two goroutines spending from
// their own slots took 29.6-64.7 ns a decision, with 128-byte ones
// 15.2-19.0).
func TestSlotsArePairsOfLinesApart(t *testing.T) {
	for _, procs := range []int{2, 3, 4, 8, 16, 64} {
		// Several counters of each size, so that an array the allocator
		// happened to align does not pass for all of them.
		for range 8 {
			var c bucket.Counter
			c.Stripe(procs)
			addrs := c.SlotAddrs()
			if len(addrs) < procs {
				t.Fatalf("Stripe(%d) made %d slots", procs, len(addrs))
			}
			for i, a := range addrs {
				if a%128 != 0 {
					t.Fatalf("Stripe(%d): slot %d at %#x, not on a 128-byte boundary", procs, i, a)
				}
				if i > 0 && a-addrs[i-1] != 128 {
					t.Fatalf("Stripe(%d): slot %d %d bytes after slot %d, want 128", procs, i, a-addrs[i-1], i-1)
				}
			}
		}
	}
}
