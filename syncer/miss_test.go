package syncer

import (
	"math"
	"testing"
)

// TestNoteMissWord: a tenant's misses since the last plan are one word:
// the tokens denied add up, saturating at 2^31-1, and the largest n
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
	if in.Missed != math.MaxInt32 {
		t.Errorf("Missed %d, want it saturated at %d", in.Missed, math.MaxInt32)
	}
	if in.Need != math.MaxInt64 {
		t.Errorf("Need %d after a miss of MaxInt64, want MaxInt64", in.Need)
	}
	tn.NoteMiss(big)
	if in := tn.take(0); in.Need < big {
		t.Errorf("Need %d after a miss of %d, want at least that", in.Need, big)
	}
}

// TestUnmiss: a request admitted after its miss takes the miss back, and
// leaves the largest n and the urgency alone; taken back after a plan took
// the miss, it makes Missed negative, saturating at -(2^31-1).
func TestUnmiss(t *testing.T) {
	var tn Tenant
	tn.NoteMiss(5)
	tn.NoteMiss(2)
	tn.Unmiss(5)
	if in := tn.take(0); in.Missed != 2 || in.Need != 5 || !in.Urgent {
		t.Fatalf("misses of 5 and 2, the 5 taken back: %+v, want Missed 2, Need 5, Urgent", in)
	}
	tn.Unmiss(3) // the miss went with the take above
	if in := tn.take(0); in.Missed != -3 || in.Need != 0 || in.Urgent {
		t.Fatalf("3 taken back after the take: %+v, want Missed -3 alone", in)
	}
	tn.NoteMiss(4)
	tn.Unmiss(math.MaxInt64)
	tn.Unmiss(math.MaxInt64)
	if in := tn.take(0); in.Missed != -math.MaxInt32 || in.Need != 4 {
		t.Errorf("after a miss of 4 and two take-backs of MaxInt64: %+v, want Missed %d, Need 4", in, -math.MaxInt32)
	}
	tn.Unmiss(-1) // no-op
	tn.NoteMiss(-1)
	if in := tn.take(0); in.Missed != 0 {
		t.Errorf("after negative n: Missed %d, want 0", in.Missed)
	}
}

// TestUnobservedMissesDoNotWake: misses taken back beyond any spend (a
// negative count) do not wake a dormant tenant, and going dormant drops
// them; a positive count or a need still wakes it.
func TestUnobservedMissesDoNotWake(t *testing.T) {
	var tn Tenant
	tn.Unmiss(2)
	if tn.wakes() {
		t.Fatal("misses taken back (-2) wake the tenant")
	}
	tn.dropUnobserved()
	if in := tn.take(0); in.Missed != 0 {
		t.Fatalf("after dropUnobserved: Missed %d, want 0", in.Missed)
	}
	tn.NoteMiss(1)
	tn.setFlag(flagUrgent, false)
	if !tn.wakes() {
		t.Fatal("a miss does not wake the tenant")
	}
	tn.Unmiss(3)
	tn.dropUnobserved()
	if in := tn.take(0); in.Missed != 0 || in.Need != 1 {
		t.Fatalf("after a miss of 1, 3 taken back and dropUnobserved: %+v, want Missed 0, Need 1", in)
	}
}

// TestNoteNeed: a need (a first lease asked for with other tenants')
// raises the largest n and makes the tenant urgent, and counts no demand.
func TestNoteNeed(t *testing.T) {
	var tn Tenant
	tn.NoteMiss(2)
	tn.NoteNeed(5)
	if in := tn.take(0); in.Missed != 2 || in.Need != 5 || !in.Urgent {
		t.Fatalf("a miss of 2 and a need of 5: %+v, want Missed 2, Need 5, Urgent", in)
	}
}
