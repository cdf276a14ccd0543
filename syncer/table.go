package syncer

import "math/bits"

// table is an immutable set of tenants looked up by name, the registry's
// read side. It is open addressing with linear probing over a power of two
// of slots, each a tenant pointer and a tag byte: the top 7 bits of the
// name's hash with the high bit set, 0 for an empty slot, so that a probe
// reads a tenant only when its tag matches (one time in 128 for another
// name). The name is the tenant's own: a slot costs 9 bytes, where a Go
// map[string]*Tenant's costs 25 (a 16-byte copy of the string header
// beside the pointer, and a control byte). At most 7/8 of the slots are
// used, the load of a Go map's: 10-21 bytes a tenant.
type table struct {
	tags  []uint8   // per slot: 0 when empty, else tagOf the hash of its tenant's name
	slots []*Tenant // len(tags) slots, a power of two
	n     int       // tenants held
}

// tableMin is the fewest slots of a table.
const tableMin = 8

// newTable returns an empty table with room for n tenants at most 7/8 of
// its slots.
func newTable(n int) *table {
	size := tableMin
	if n > tableMin*7/8 {
		// The smallest power of two with n <= size*7/8.
		size = 1 << bits.Len(uint((n*8+6)/7-1))
	}
	return &table{tags: make([]uint8, size), slots: make([]*Tenant, size)}
}

// tagOf returns the tag of a slot holding a name with hash h.
func tagOf(h uint64) uint8 { return uint8(h>>57) | 0x80 }

// find returns the tenant named name, whose hash is h, or nil.
func (tb *table) find(name string, h uint64) *Tenant {
	mask := uint64(len(tb.tags) - 1)
	tag := tagOf(h)
	for i := h & mask; ; i = (i + 1) & mask {
		switch tb.tags[i] {
		case 0:
			return nil
		case tag:
			if t := tb.slots[i]; t.name == name {
				return t
			}
		}
	}
}

// add puts t, whose name has hash h and is not in tb, into tb, which must
// have room for it; only while tb is built, before it is shared.
func (tb *table) add(t *Tenant, h uint64) {
	mask := uint64(len(tb.tags) - 1)
	i := h & mask
	for tb.tags[i] != 0 {
		i = (i + 1) & mask
	}
	tb.tags[i], tb.slots[i] = tagOf(h), t
	tb.n++
}

// all yields the tenants of tb.
func (tb *table) all(yield func(*Tenant) bool) {
	for _, t := range tb.slots {
		if t != nil && !yield(t) {
			return
		}
	}
}
