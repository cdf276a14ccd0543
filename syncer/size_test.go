package syncer

import (
	"testing"
	"unsafe"
)

// TestRecordSizes holds the per-tenant records to the sizes their docs
// state. A Tenant is allocated once per tenant (the registry holds it) and
// takes the 192-byte size class, which it fills: a byte more costs 16
// (BenchmarkTenantMemory measures the whole). The ledger's batches are
// allocated while the tenant holds leased tokens (48 bytes, a size class
// of their own) and a reservation while reserved tokens are to come (24).
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Tenant", unsafe.Sizeof(Tenant{}), 192},
		{"State", unsafe.Sizeof(State{}), 88},
		{"Ledger", unsafe.Sizeof(Ledger{}), 16},
		{"batches", unsafe.Sizeof(batches{}), 48},
		{"reservation", unsafe.Sizeof(reservation{}), 24},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.want)
		}
	}
}
