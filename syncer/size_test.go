package syncer

import (
	"testing"
	"unsafe"
)

// TestRecordSizes holds the per-tenant records to the sizes their docs
// state. A Tenant is allocated once per tenant (the registry holds it),
// and is all a dormant tenant keeps: 96 bytes, a size class it fills
// (its counter's pointer to per-P slots, WithPerCPUTokens, took it from
// 80 to 88, and the quiet time rounds read without its lock, quiet.go,
// to 96, in the same size class). Until it is dormant, a tenant also has a
// leaseState (128 bytes, a size class it fills), with the ledger's
// batches while it holds leased tokens (48 bytes, a size class of their
// own) and a reservation while reserved tokens or a rate share's are to
// come (32).
// BenchmarkTenantMemory measures the whole.
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Tenant", unsafe.Sizeof(Tenant{}), 96},
		{"leaseState", unsafe.Sizeof(leaseState{}), 128},
		{"State", unsafe.Sizeof(State{}), 96},
		{"Ledger", unsafe.Sizeof(Ledger{}), 16},
		{"batches", unsafe.Sizeof(batches{}), 48},
		{"reservation", unsafe.Sizeof(reservation{}), 32},
	} {
		if c.got > c.want {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.want)
		}
	}
}
