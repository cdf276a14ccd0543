package lease

// Laying out the script calls of a pipeline.

import (
	"math"
	"strconv"
	"strings"
)

// encoder lays out the script calls of one pipeline in a few allocations
// for all of them, where building each call on its own took about a
// dozen a tenant (each key and number a string of its own, a slice of
// keys, one of arguments, and each string boxed into an interface). A
// 10,000-tenant sync round is that many calls, and their garbage is most
// of what the syncer makes:
//
//   - every key and number is a substring of one string (text);
//   - the calls' commands and keys are cut from one block each;
//   - a number equal to the one the previous tenant sent in the same
//     place is sent as the same boxed string: tenants of one quota send
//     the same rate and burst, and often the same want.
//
// What is left a tenant is boxing its keys and its other numbers, which
// go-redis takes as interface values, and go-redis's own command.
//
// The arguments are the strings that formatting each call on its own
// gives (strconv's decimal forms; formatRate for floats), so the bytes
// sent do not change.
type encoder struct {
	text strings.Builder
	num  [32]byte      // scratch for formatting a number
	cmds []interface{} // what is left of the block the calls' commands are cut from
	keys []string      // likewise, of their keys

	// The last value sent in each place of acquire.lua's and
	// release.lua's arguments. A reservation's length or a release's age
	// varies too much to be worth remembering.
	rate, burst, want, demand, amount last
}

// last is the last value an encoder sent in one place, and its string,
// boxed.
type last struct {
	bits uint64      // the int64, or the float64's bits: "-0" is not "0"
	arg  interface{} // nil before the first
}

// newEncoder returns an encoder for calls with keys keys and cmds command
// arguments (see call.cmd) in all, and room for about text bytes of keys
// and numbers (it grows past that as needed).
func newEncoder(keys, cmds, text int) *encoder {
	e := &encoder{cmds: make([]interface{}, cmds), keys: make([]string, keys)}
	e.text.Grow(text)
	return e
}

// call cuts the next call, of nkeys keys and nargs script arguments, from
// e's blocks.
func (e *encoder) call(nkeys, nargs int) call {
	n := 3 + nkeys + nargs
	cl := call{keys: e.keys[:nkeys:nkeys], cmd: e.cmds[:n:n]}
	e.keys, e.cmds = e.keys[nkeys:], e.cmds[n:]
	return cl
}

// since returns what e.text holds from byte start on. Its bytes stay as
// they are while more is written: a strings.Builder only appends, and
// when it grows it leaves the old buffer to the strings cut from it.
func (e *encoder) since(start int) string {
	return e.text.String()[start:]
}

// tenantKeys sets keys[0:3] to the keys of tenant's bucket under prefix:
// the bucket's, the bucket's with suffix, and its QuotaKey.
func (e *encoder) tenantKeys(keys []string, prefix, tenant, suffix string) {
	start := e.text.Len()
	writeKey(&e.text, prefix, tenant)
	e.text.WriteString(suffix)
	keys[1] = e.since(start)
	keys[0] = keys[1][:len(keys[1])-len(suffix)]
	start = e.text.Len()
	e.text.WriteString(keys[0])
	e.text.WriteString(quotaSuffix)
	keys[2] = e.since(start)
}

// int returns v in decimal, boxed: the box of the previous value of l
// when it was v (l may be nil: nothing to remember).
func (e *encoder) int(l *last, v int64) interface{} {
	if l != nil && l.arg != nil && l.bits == uint64(v) {
		return l.arg
	}
	start := e.text.Len()
	e.text.Write(strconv.AppendInt(e.num[:0], v, 10))
	return l.remember(uint64(v), e.since(start))
}

// float returns v as formatRate writes it, boxed, like int.
func (e *encoder) float(l *last, v float64) interface{} {
	bits := math.Float64bits(v)
	if l != nil && l.arg != nil && l.bits == bits {
		return l.arg
	}
	start := e.text.Len()
	e.text.Write(appendRate(e.num[:0], v))
	return l.remember(bits, e.since(start))
}

// remember makes s, boxed, l's value for bits (nothing when l is nil)
// and returns the box.
func (l *last) remember(bits uint64, s string) interface{} {
	arg := interface{}(s)
	if l != nil {
		l.bits, l.arg = bits, arg
	}
	return arg
}

// numbersLen is about how many bytes a tenant's numbers take in an
// encoder's text, for its first estimate of its size: the ones that
// differ between tenants are mostly a want of a few digits and a demand
// of up to 17 significant ones.
const numbersLen = 32
