package syncer

import (
	"math"
	"testing"
)

// TestNoteMissWord: a tenant's misses since the last plan are one word:
// the tokens denied add up, saturating at 2^32-1, and the largest n
// denied is kept exactly up to 2^24 and rounded up beyond; take reads and
// resets both.
func TestNoteMissWord(t *testing.T) {
	var tn Tenant
	tn.NoteMiss(3)
	tn.NoteMiss(10)
	tn.NoteMiss(5)
	in := tn.take(0)
	if in.Missed != 18 || in.Need != 10 || !in.Urgent {
		t.Fatalf("after misses of 3, 10 and 5: %+v, want Missed 18, Need 10, Urgent", in)
	}
	if in := tn.take(0); in.Missed != 0 || in.Need != 0 || in.Urgent {
		t.Fatalf("a second take: %+v, want nothing", in)
	}
	big := int64(1<<24 + 1) // not a float32
	tn.NoteMiss(big)
	tn.NoteMiss(math.MaxInt64)
	in = tn.take(0)
	if in.Missed != math.MaxUint32 {
		t.Errorf("Missed %d, want it saturated at %d", in.Missed, uint32(math.MaxUint32))
	}
	if in.Need != math.MaxInt64 {
		t.Errorf("Need %d after a miss of MaxInt64, want MaxInt64", in.Need)
	}
	tn.NoteMiss(big)
	if in := tn.take(0); in.Need < big {
		t.Errorf("Need %d after a miss of %d, want at least that", in.Need, big)
	}
}
