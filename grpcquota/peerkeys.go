package grpcquota

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"unsafe"

	"google.golang.org/grpc/peer"
)

// PeerKey returns the key of a call by its peer: the IP address of a TCP
// peer (IPv4-mapped addresses as IPv4), else the peer address's string,
// "" without a peer or with a nil address (also a nil pointer of the net
// package's address types).
func PeerKey(ctx context.Context) string { return peerKey(ctx, nil) }

// peerKey is PeerKey, with the keys of IPv4 peers taken from c unless c
// is nil.
func peerKey(ctx context.Context, c *peerKeys) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil || nilNetAddr(p.Addr) {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		if ip4 := a.IP.To4(); ip4 != nil {
			// The common case, IPv4 or IPv4-mapped: the netip.Addr of its
			// 4 bytes, without AddrPort's conversion and Unmap.
			if c != nil {
				return c.ipv4([4]byte(ip4))
			}
			return netip.AddrFrom4([4]byte(ip4)).String()
		}
		if ap := a.AddrPort(); ap.Addr().IsValid() {
			return ap.Addr().Unmap().WithZone("").String()
		}
	}
	return p.Addr.String()
}

// nilNetAddr reports whether a is a nil pointer of one of the net
// package's address types: a != nil holds for it, but it has no address
// (*net.TCPAddr's fields cannot be read, and String gives every such
// peer the one key "<nil>").
func nilNetAddr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a == nil
	case *net.UDPAddr:
		return a == nil
	case *net.UnixAddr:
		return a == nil
	case *net.IPAddr:
		return a == nil
	}
	return false
}

// A limiter keeps the keys of up to peerKeySlots IPv4 peers.
const (
	peerKeyBits  = 8
	peerKeySlots = 1 << peerKeyBits
)

// peerKeys holds the keys of the IPv4 peers a limiter saw last. Formatting
// a peer's address is an allocation per call, the only one of an admission
// without metadata, and a server's calls come from few addresses at a time
// (its clients', or their proxies'). It is direct-mapped by address: a
// slot holds the last address seen there with its key, so two addresses
// that share a slot take turns. A miss costs one allocation, as formatting
// the key alone would (the entry holds the key's bytes and no pointer),
// and an atomic store: with more peers at a time than slots, most calls
// miss, and pay that store on top of the formatting (BenchmarkInterceptorOverhead,
// many-peers). An entry is never written once stored, so the one that is
// loaded can be read without a lock.
type peerKeys [peerKeySlots]atomic.Pointer[peerKeyEntry]

// peerKeyEntry is an IPv4 peer and its key's bytes: one allocation of 24
// bytes without pointers (the garbage collector does not scan it), which
// the key, a string over buf, keeps whole while it lives.
type peerKeyEntry struct {
	ip  [4]byte
	n   uint8 // the key's length
	buf [len("255.255.255.255")]byte
}

// ipv4 returns the key of the IPv4 peer ip: netip.AddrFrom4(ip).String().
func (c *peerKeys) ipv4(ip [4]byte) string {
	slot := &c[peerKeySlot(ip)]
	e := slot.Load()
	if e == nil || e.ip != ip {
		e = &peerKeyEntry{ip: ip}
		e.n = uint8(len(netip.AddrFrom4(ip).AppendTo(e.buf[:0])))
		slot.Store(e)
	}
	// buf is never written again once the entry is stored, which is what
	// makes the string over it safe.
	return unsafe.String(&e.buf[0], e.n)
}

// peerKeySlot returns the slot of ip in a peerKeys. Fibonacci hashing:
// the top bits of the product depend on every byte of the address.
func peerKeySlot(ip [4]byte) uint32 {
	return binary.BigEndian.Uint32(ip[:]) * 0x9e3779b9 >> (32 - peerKeyBits)
}
