package syncer

import (
	"testing"
	"unsafe"
)

// TestRecordSizes holds the per-tenant records to the sizes their docs
// state: a Tenant is allocated once per tenant (the registry holds it),
// and it fits the 240-byte Go size class (232 bytes: a byte more than 240
// would cost 16)
// (BenchmarkTenantMemory measures the whole).
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Tenant", unsafe.Sizeof(Tenant{}), 240},
		{"State", unsafe.Sizeof(State{}), 136},
		{"Ledger", unsafe.Sizeof(Ledger{}), 56},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.want)
		}
	}
}
