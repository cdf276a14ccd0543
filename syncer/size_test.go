package syncer

import (
	"testing"
	"unsafe"
)

// TestRecordSizes holds the per-tenant records to the sizes their docs
// state: a Tenant is allocated once per tenant (the registry holds it),
// and 240 bytes is a Go size class, so a byte more costs 16
// (BenchmarkTenantMemory measures the whole).
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Tenant", unsafe.Sizeof(Tenant{}), 240},
		{"State", unsafe.Sizeof(State{}), 144},
		{"Ledger", unsafe.Sizeof(Ledger{}), 56},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.want)
		}
	}
}
