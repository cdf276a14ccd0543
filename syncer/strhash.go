package syncer

import (
	"math/bits"
	"math/rand/v2"
)

// hashKey seeds the registry's string hash: random per registry, so that
// which names collide in its tables cannot be chosen from outside.
type hashKey struct{ k0, k1 uint64 }

func newHashKey() hashKey { return hashKey{k0: rand.Uint64(), k1: rand.Uint64() | 1} }

// fold is a folded multiply: the two halves of the 128-bit product of a
// and b, xored. Every bit of the result depends on every bit of both.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// r8 and r4 read 8 and 4 bytes of s at i, little-endian: one load each.
func r8(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func r4(s string, i int) uint64 {
	s = s[i : i+4]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// strHash hashes s under k: the length (times k.k1) and then each 8-byte
// word of s are folded into a state seeded with k.k0, one folded multiply by k.k1 per
// word; the last word is the string's last 8 bytes (overlapping the one
// before it), and a string shorter than 8 bytes is read as one word of
// its first and last bytes. A string of 9 to 16 bytes, most tenant
// names, is two words in one folded multiply: the state with its first
// word, by k.k1 with its last. A final fold by k.k0 spreads the last word
// over the high bits, which tables read as tags. Keyed per registry, the
// names that collide cannot be chosen from outside. On the request path
// it replaces hash/maphash.String, whose calls down to the AES hash cost
// 67 instructions per lookup of a 10-byte name, against about 25 here
// (callgrind, BenchmarkAllowTenants).
func strHash(s string, k hashKey) uint64 {
	n := len(s)
	// The length goes in multiplied by the key: XORed in as it is, it
	// cancelled against the bytes of the first word, so that names of
	// different lengths collided under every key ("a" and "ba"; 8 names
	// of 9 to 16 bytes), which an outsider could choose to crowd a
	// table's probe chains (TestStrHashCollisionsNeedTheKey).
	h := k.k0 ^ uint64(n)*k.k1
	var w uint64
	switch {
	case n > 8 && n <= 16:
		// Two words in one multiply, the second keyed by k.k1, the
		// loop's multiplier: which pairs of words collide depends on
		// both halves of the key. One multiply fewer on the request
		// path's chain of dependent ones than the loop's word and then
		// the last: BenchmarkAllowTenants (names of 8 to 11 bytes) went
		// from 13.5-13.8 ns to 12.2-12.5 (docs/performance.md, "One
		// multiply fewer in the registry's hash").
		return fold(fold(h^r8(s, 0), k.k1^r8(s, n-8)), k.k0|1)
	case n >= 8:
		for i := 0; i < n-8; i += 8 {
			h = fold(h^r8(s, i), k.k1)
		}
		w = r8(s, n-8)
	case n >= 4:
		w = r4(s, 0)<<32 | r4(s, n-4)
	case n > 0:
		w = uint64(s[0]) | uint64(s[n>>1])<<8 | uint64(s[n-1])<<16
	}
	return fold(fold(h^w, k.k1), k.k0|1)
}
