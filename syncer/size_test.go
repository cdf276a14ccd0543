package syncer

import (
	"testing"
	"unsafe"
)

// TestRecordSizes holds the per-tenant records to the sizes their docs
// state: a Tenant is allocated once per tenant (the registry holds it),
// and it takes the 256-byte size class (248 bytes since it keeps the
// global level for Decision.FleetRemaining; 240 before, a size class of
// its own), so up to 8 more bytes are free and a byte beyond costs 32
// (BenchmarkTenantMemory measures the whole).
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Tenant", unsafe.Sizeof(Tenant{}), 248},
		{"State", unsafe.Sizeof(State{}), 144},
		{"Ledger", unsafe.Sizeof(Ledger{}), 56},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.want)
		}
	}
}
