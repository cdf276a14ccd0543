// Package sfield builds the RateLimit field value that the middleware
// (an HTTP header) and grpcquota (a metadata value) send, in one
// allocation: the rule lives here, both call it.
package sfield

import (
	"strconv"
	"unsafe"
)

// MaxInteger is the largest RFC 9651 Integer.
const MaxInteger = 999_999_999_999_999

// field is a field's one-value slice and the bytes of its value, B being
// a byte array: one allocation for both. Its size is a malloc size class
// (48 or 64 bytes), so that no byte of the allocation is wasted on the
// way to the next class.
type field[B any] struct {
	val [1]string
	buf B
}

// newField returns the one-value slice of a new field[B] holding v, which
// fits in B. The value's bytes are never written again, which is what
// makes the string over them safe.
func newField[B any](v []byte) []string {
	f := new(field[B])
	b := unsafe.Slice((*byte)(unsafe.Pointer(&f.buf)), len(v))
	copy(b, v)
	f.val[0] = unsafe.String(unsafe.SliceData(b), len(b))
	return f.val[:1:1]
}

// RateLimit returns the value rPrefix r;t=t (no ";t=" when t < 0; t at
// most MaxInteger) as a one-value slice, rPrefix being a policy's
// `"name";r=`. Slice and value are one allocation, of 48 bytes for a value
// of up to 32 bytes (`"default";r=` and 13 digits of r, with t=0) and of 64
// for one of up to 48; a longer value (names of more than about 20 bytes)
// is a second allocation.
func RateLimit(rPrefix string, r, t int64) []string {
	// Built on the stack first: its length picks the allocation's size.
	var tmp [64]byte
	b := append(tmp[:0], rPrefix...)
	b = strconv.AppendInt(b, r, 10)
	if t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(t, MaxInteger), 10)
	}
	switch {
	case len(b) <= 32:
		return newField[[32]byte](b)
	case len(b) <= 48:
		return newField[[48]byte](b)
	}
	return []string{string(b)}
}
