// Package sfield builds the RateLimit field value that the middleware
// (an HTTP header) and grpcquota (a metadata value) send, in one
// allocation: the rule lives here, both call it.
package sfield

import "unsafe"

// MaxInteger is the largest RFC 9651 Integer.
const MaxInteger = 999_999_999_999_999

// maxDigits is the number of digits of MaxInteger.
const maxDigits = len("999999999999999")

// field is a field's one-value slice and the bytes of its value, B being
// a byte array: one allocation for both. Its sizes are malloc size
// classes (48 and 64 bytes), so that no byte of the allocation is wasted
// on the way to the next class.
type field[B any] struct {
	val [1]string
	buf B
}

// newField returns the one-value slice of a new field[B] holding the value
// prefix+tail, which fits in B. The value's bytes are never written again,
// which is what makes the string over them safe.
func newField[B any](prefix string, tail []byte) []string {
	f := new(field[B])
	b := unsafe.Slice((*byte)(unsafe.Pointer(&f.buf)), len(prefix)+len(tail))
	copy(b[copy(b, prefix):], tail)
	f.val[0] = unsafe.String(unsafe.SliceData(b), len(b))
	return f.val[:1:1]
}

// RateLimit returns the value rPrefix r;t=t (no ";t=" when t < 0; r and t
// at most MaxInteger) as a one-value slice, rPrefix being a policy's
// `"name";r=`. Slice and value are one allocation, of 48 bytes for a value
// of up to 32 bytes (`"default";r=` and 13 digits of r, with t=0) and of 64
// for one of up to 48; a longer value (names of more than about 20 bytes)
// is a second allocation.
func RateLimit(rPrefix string, r, t int64) []string {
	// What follows rPrefix, written backwards from the end of tail: its
	// length picks the allocation's size before anything is allocated.
	var tail [maxDigits + len(";t=") + maxDigits]byte
	i := len(tail)
	if t >= 0 {
		i = putDigits(&tail, i, uint64(min(t, MaxInteger)))
		i -= len(";t=")
		copy(tail[i:], ";t=")
	}
	i = putDigits(&tail, i, uint64(min(max(r, 0), MaxInteger)))
	switch n := len(rPrefix) + len(tail) - i; {
	case n <= 32:
		return newField[[32]byte](rPrefix, tail[i:])
	case n <= 48:
		return newField[[48]byte](rPrefix, tail[i:])
	}
	return []string{rPrefix + string(tail[i:])}
}

// digitPairs holds the two digits of each number from 00 to 99.
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// putDigits writes the decimal digits of u, at most maxDigits, into b so
// that they end before b[end], and returns the index of the first. It is
// strconv.AppendUint's rule, two digits at a time, without its append:
// the caller knows where the digits go.
func putDigits(b *[2*maxDigits + len(";t=")]byte, end int, u uint64) int {
	i := end
	for u >= 100 {
		q := u / 100
		j := (u - q*100) * 2
		i -= 2
		b[i], b[i+1] = digitPairs[j], digitPairs[j+1]
		u = q
	}
	if u >= 10 {
		i -= 2
		b[i], b[i+1] = digitPairs[u*2], digitPairs[u*2+1]
		return i
	}
	i--
	b[i] = byte('0' + u)
	return i
}
