package grpcquota

import (
	"net/netip"
	"sync"
	"testing"
)

func TestPeerKeys(t *testing.T) {
	var c peerKeys
	a, b := [4]byte{192, 0, 2, 1}, [4]byte{198, 51, 100, 7}
	// other shares a's slot.
	var other [4]byte
	for i := 0; ; i++ {
		other = [4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}
		if peerKeySlot(other) == peerKeySlot(a) {
			break
		}
	}
	for _, ip := range [][4]byte{a, b, a, other, a, b} {
		if got, want := c.ipv4(ip), netip.AddrFrom4(ip).String(); got != want {
			t.Errorf("ipv4(%v) = %q, want %q", ip, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.ipv4(a) }); n != 0 {
		t.Errorf("ipv4 of a cached address allocates %v times, want 0", n)
	}
	turn := 0
	if n := testing.AllocsPerRun(100, func() { turn++; c.ipv4([2][4]byte{a, other}[turn%2]) }); n != 1 {
		t.Errorf("ipv4 of an address not cached allocates %v times, want 1", n)
	}

	// Readers and writers of one slot at once (for the race detector).
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := a
			if g%2 == 1 {
				ip = other
			}
			want := netip.AddrFrom4(ip).String()
			for range 1000 {
				if got := c.ipv4(ip); got != want {
					t.Errorf("ipv4(%v) = %q, want %q", ip, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
