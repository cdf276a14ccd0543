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

// rateField is a field's one-value slice and the bytes of its value, when
// they fit: one allocation of 64 bytes for both.
type rateField struct {
	val [1]string
	buf [48]byte
}

// RateLimit returns the value rPrefix r;t=t (no ";t=" when t < 0; t at
// most MaxInteger) as a one-value slice, rPrefix being a policy's
// `"name";r=`. The value's bytes share the slice's allocation when they
// fit (names of up to about 20 bytes); they are never written again, which
// is what makes the string over them safe.
func RateLimit(rPrefix string, r, t int64) []string {
	f := new(rateField)
	b := append(f.buf[:0], rPrefix...)
	b = strconv.AppendInt(b, r, 10)
	if t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(t, MaxInteger), 10)
	}
	if cap(b) == len(f.buf) && len(b) > 0 && &b[0] == &f.buf[0] {
		f.val[0] = unsafe.String(&f.buf[0], len(b))
	} else {
		f.val[0] = string(b)
	}
	return f.val[:1:1]
}
