package keyslot

import "testing"

func TestCRC16(t *testing.T) {
	// CRC-16/XMODEM check value, also the Redis Cluster specification's.
	if got := CRC16("123456789"); got != 0x31C3 {
		t.Errorf("CRC16(123456789) = %#x, want 0x31c3", got)
	}
}

func TestOfHashTag(t *testing.T) {
	if Of("a{tag}b") != Of("tag") || Of("x{}y") != CRC16("x{}y")%NumSlots {
		t.Error("Of does not hash the hash tag alone, or hashes an empty one")
	}
}
