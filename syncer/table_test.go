package syncer

import (
	"hash/maphash"
	"strconv"
	"testing"
)

// TestTableSizes: a table for n tenants has the fewest slots, a power of
// two, that hold n at 7/8 of them or less, and always an empty one.
func TestTableSizes(t *testing.T) {
	for n := range 5000 {
		size := len(newTable(n).tags)
		if size&(size-1) != 0 || size < tableMin {
			t.Fatalf("newTable(%d): %d slots, want a power of two >= %d", n, size, tableMin)
		}
		if n*8 > size*7 || n >= size {
			t.Fatalf("newTable(%d): %d slots, more than 7/8 used", n, size)
		}
		if size > tableMin && n*8 <= size/2*7 {
			t.Fatalf("newTable(%d): %d slots, half would do", n, size)
		}
	}
}

// TestTableFind: every tenant added is found by its name, and names not
// added are not, in tables filled to their limit, with names that share
// their hash's low bits (the probe collides) and their tag.
func TestTableFind(t *testing.T) {
	seed := maphash.MakeSeed()
	for _, n := range []int{0, 1, 7, 8, 100, 1000} {
		tb := newTable(n)
		ts := make([]*Tenant, n)
		for i := range ts {
			ts[i] = &Tenant{name: "tenant-" + strconv.Itoa(i)}
			tb.add(ts[i], maphash.String(seed, ts[i].name))
		}
		for _, tn := range ts {
			if got := tb.find(tn.name, maphash.String(seed, tn.name)); got != tn {
				t.Fatalf("%d tenants: find(%q) = %p, want %p", n, tn.name, got, tn)
			}
		}
		for i := range 1000 {
			name := "absent-" + strconv.Itoa(i)
			if got := tb.find(name, maphash.String(seed, name)); got != nil {
				t.Fatalf("%d tenants: find(%q) = %q, want nil", n, name, got.name)
			}
		}
		if n > 0 {
			// Every name on one hash: the probes walk the whole run.
			col := newTable(n)
			for _, tn := range ts {
				col.add(tn, 42)
			}
			for _, tn := range ts {
				if got := col.find(tn.name, 42); got != tn {
					t.Fatalf("%d tenants on one hash: find(%q) = %p, want %p", n, tn.name, got, tn)
				}
			}
			if got := col.find("absent", 42); got != nil {
				t.Fatalf("%d tenants on one hash: find(absent) = %q", n, got.name)
			}
		}
		var seen int
		for range tb.all {
			seen++
		}
		if seen != n || tb.n != n {
			t.Fatalf("%d tenants added: all yields %d, n = %d", n, seen, tb.n)
		}
	}
}

// TestAllYieldsTenantsMovedDuringTheWalk: registry.all yields a tenant
// that a lookup's rebuild moves from dirty into a new read table while the
// walk is under way. It walked read, then copied dirty: the tenant was in
// neither by then, and Close (ReleaseAll) and ticks skipped it.
func TestAllYieldsTenantsMovedDuringTheWalk(t *testing.T) {
	var r registry
	r.init()
	for i := range 64 {
		r.loadOrStore(&Tenant{name: "old-" + strconv.Itoa(i)})
	}
	x := &Tenant{name: "X"}
	r.loadOrStore(x)
	if r.dirty["X"] != x {
		t.Fatal("the last tenant is not in dirty: the test needs it there")
	}
	seen := map[string]bool{}
	first := true
	for tn := range r.all {
		seen[tn.name] = true
		if first {
			first = false
			// Requests' slow lookups, until dirty is copied into read.
			for range 16 {
				r.load("X")
			}
		}
	}
	if !seen["X"] || len(seen) != 65 {
		t.Fatalf("registry.all yielded %d of 65 tenants, X among them: %v", len(seen), seen["X"])
	}
}
