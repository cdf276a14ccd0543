package lease

import (
	"errors"
	"strings"
	"testing"
)

// TestBadAcquireReplyNamesTheValue: an acquire reply whose field parses
// but is out of range (a negative count, a reservation above the grant,
// a pace of 0 for a reservation, a negative wait) is refused with an
// error that wraps ErrBadReply and names the field and the value it
// got, as one that does not parse does. Such a field has no parse error
// to wrap: wrapped anyway, the message read "%!w(<nil>)" where the value
// belongs.
func TestBadAcquireReplyNamesTheValue(t *testing.T) {
	for _, tc := range []struct {
		reply, field, value string
	}{
		{"1 0.5 1700000000000000 -1  0  0 ", "instances", "-1"},
		{"1 0.5 1700000000000000 0 -2 0  0 ", "share", "-2"},
		{"1 0.5 1700000000000000 0  2 3 0 ", "reserved", "2"},
		{"2 0.5 1700000000000000 0  -1 3 0 ", "reserved", "-1"},
		{"2 0.5 1700000000000000 0  1 0 0 ", "pace", "0"},
		{"1 0.5 1700000000000000 0  0  -5 ", "wait", "-5"},
	} {
		g, err := ParseAcquireReply(tc.reply, 1)
		if !errors.Is(err, ErrBadReply) {
			t.Errorf("%q: %+v, %v: want ErrBadReply", tc.reply, g, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "%!") || !strings.Contains(msg, tc.field+" "+tc.value) {
			t.Errorf("%q: error %q: want it to name %s %s", tc.reply, msg, tc.field, tc.value)
		}
	}
}
