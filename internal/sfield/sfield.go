// Package sfield builds the RateLimit field value that the middleware
// (an HTTP header) and grpcquota (a metadata value) send, slice and value
// in one allocation: the rule lives here, both call it.
package sfield

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// MaxInteger is the largest RFC 9651 Integer.
const MaxInteger = 999_999_999_999_999

// field is a field's one-value slice and the bytes of its value, B being
// a byte array: one block of memory for both. Its sizes are malloc size
// classes (48 and 64 bytes), so that no byte of an allocation of its own
// is wasted on the way to the next class.
type field[B any] struct {
	val [1]string
	buf B
}

// newField returns the one-value slice of a new field[B] holding the value
// prefix+tail, which fits in B. The value's bytes are never written again,
// which is what makes the string over them safe.
func newField[B any](prefix string, tail []byte) []string {
	return fill(new(field[B]), prefix, tail)
}

// fill writes prefix+tail, which fits in B, into f (new) and returns its
// one-value slice.
func fill[B any](f *field[B], prefix string, tail []byte) []string {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&f.buf)), len(prefix)+len(tail))
	copy(b[copy(b, prefix):], tail)
	f.val[0] = unsafe.String(unsafe.SliceData(b), len(b))
	return f.val[:1:1]
}

// RateLimit returns the value rPrefix r;t=t (no ";t=" when t < 0; r and t
// at most MaxInteger) as a one-value slice, rPrefix being a policy's
// `"name";r=`. Slice and value are one block: for a value of up to 32
// bytes (`"default";r=` and 13 digits of r, with t=0) an allocation of
// 48 bytes; for one of up to 48 one of 64 bytes; a longer value (names of more than about 20
// bytes) is a second allocation.
func RateLimit(rPrefix string, r, t int64) []string {
	// What follows rPrefix: r's digits, then ";t=" and t's. The digits of
	// r take tail[i:16] (putDigits writes all 16 places, leading zeros
	// included), so that its length picks the allocation's size before
	// anything is allocated.
	var tail [16 + len(";t=") + 16]byte
	i := putDigits((*[16]byte)(tail[:16]), uint64(min(max(r, 0), MaxInteger)))
	end := 16
	switch {
	case t < 0:
	case t < 10: // t=0 of every admitted request: one store
		binary.LittleEndian.PutUint32(tail[16:], uint32(';')|uint32('t')<<8|uint32('=')<<16|uint32('0'+t)<<24)
		end = 20
	default:
		copy(tail[16:], ";t=")
		j := 19 + putDigits((*[16]byte)(tail[19:]), uint64(min(t, MaxInteger)))
		end = 19 + copy(tail[19:], tail[j:])
	}
	switch n := len(rPrefix) + end - i; {
	case n <= 32:
		return newField[[32]byte](rPrefix, tail[i:end])
	case n <= 48:
		return newField[[48]byte](rPrefix, tail[i:end])
	}
	return []string{rPrefix + string(tail[i:end])}
}

// Prefix is a policy's RateLimit prefix, `"name";r=`, with its first 16
// bytes as two words, for RateLimit's fast path. Make it with NewPrefix,
// once per policy.
type Prefix struct {
	s      string
	w0, w1 uint64 // s's first 16 bytes, little endian, zero past its end
}

// NewPrefix returns the Prefix of rPrefix, a policy's `"name";r=`.
func NewPrefix(rPrefix string) Prefix {
	var b [16]byte
	copy(b[:], rPrefix)
	return Prefix{s: rPrefix, w0: binary.LittleEndian.Uint64(b[0:]), w1: binary.LittleEndian.Uint64(b[8:])}
}

// String returns the prefix.
func (p *Prefix) String() string { return p.s }

// RateLimit is RateLimit(p.String(), r, t). For t of 0 to 9 (an
// admission's t=0) and a value of up to 32 bytes (prefixes of up to 13
// bytes, `"default";r=` is 12), it writes the value into the field in
// five stores of whole words, the prefix's two, the digits' two and
// ";t=t" (digits8 for the digits, shifted so that the first significant
// one comes first): about 150 instructions of its own per request of the
// middleware's benchmark under callgrind, digits (69) included, its one
// allocation not, against 230 for RateLimit with its stack array and two
// copies (memmove 42) of the prefix and of the digits.
func (p *Prefix) RateLimit(r, t int64) []string {
	// digits16 is a call (too large to be inlined), about 10
	// instructions with its spills; writing it out here would be a second
	// copy of the rule.
	a, c, lz := digits16(uint64(min(max(r, 0), MaxInteger)))
	pl, nd := len(p.s), 16-int(lz)
	n := pl + nd + len(";t=0")
	if uint64(t) > 9 || pl > 16 || n > 32 {
		return RateLimit(p.s, r, t)
	}
	// The 16 digit bytes shifted down by the lz leading zeros: the
	// significant digits first, then zero bytes, which ";t=t" and the
	// value's end cover. Every shift is by at most 63 (s&63, and c<<1
	// shifted by 63-s for c<<(64-s)), which spares the compiler's masks
	// for shifts of 64 or more.
	var d0, d1 uint64
	if s := lz * 8 & 63; lz < 8 {
		d0, d1 = a>>s|c<<1<<((63-s)&63), c>>s
	} else {
		d0 = c >> s // lz*8 - 64
	}
	f := new(field[[32]byte])
	b := &f.buf
	binary.LittleEndian.PutUint64(b[0:], p.w0)
	binary.LittleEndian.PutUint64(b[8:], p.w1)
	binary.LittleEndian.PutUint64(b[pl:], d0)
	binary.LittleEndian.PutUint64(b[pl+8:], d1)
	// b[pl+nd:n], n <= 32 (checked above), unchecked by the compiler.
	binary.LittleEndian.PutUint32((*[4]byte)(unsafe.Add(unsafe.Pointer(b), pl+nd))[:],
		uint32(';')|uint32('t')<<8|uint32('=')<<16|uint32('0'+t)<<24)
	f.val[0] = unsafe.String(&b[0], n)
	return f.val[:1:1]
}

// putDigits writes the decimal digits of u < 1e16 into b, right-aligned
// with leading zeros, and returns the index of the first significant one
// (15 for u = 0, whose digit is "0").
//
// Eight digits at a time in the bytes of a word (digits8), two stores:
// about 30 instructions for the 13 digits of the middleware benchmarks' r
// (Burst 1<<40) under callgrind, against 212 for strconv's rule of two
// digits per division by 100, table look-ups and bounds checks included.
func putDigits(b *[16]byte, u uint64) int {
	a, c, lz := digits16(u)
	binary.LittleEndian.PutUint64(b[0:], a)
	binary.LittleEndian.PutUint64(b[8:], c)
	return int(lz)
}

// digits16 returns the 16 decimal digits of u < 10^16 as ASCII in the
// bytes of two words (the first eight in a, little endian: a's low byte
// is the first digit), and how many of them are leading zeros, at most
// 15 (zero itself has one digit). The leading zeros are the low zero
// bytes of the digits before they are made ASCII: of a, then of c.
func digits16(u uint64) (a, c uint64, lz uint) {
	hi := u / 1e8
	a, c = digits8(hi), digits8(u-hi*1e8)
	lz = uint(bits.TrailingZeros64(a)) / 8
	if hi == 0 {
		lz = min(8+uint(bits.TrailingZeros64(c))/8, 15)
	}
	return a | zeros, c | zeros, lz
}

// zeros is '0' in each byte of a word.
const zeros = 0x3030_3030_3030_3030

// digits8 returns the eight decimal digits of x < 1e8 as the bytes of a
// word, the most significant digit in the lowest byte (first in memory,
// little endian), each 0 to 9: x split into two halves of four digits in
// 32-bit lanes, each split into two of two digits in 16-bit lanes, each
// split into two digits in bytes, every lane at once. A quotient by 100 is
// (v*10486)>>20 for v < 10000 and by 10 is (v*103)>>10 for v < 100, the
// lanes wide enough that no product carries into the next.
func digits8(x uint64) uint64 {
	v := x/10000 | (x%10000)<<32
	q := (v * 10486 >> 20) & 0x0000_007f_0000_007f
	v = q | (v-q*100)<<16
	q = (v * 103 >> 10) & 0x000f_000f_000f_000f
	return q | (v-q*10)<<8
}
