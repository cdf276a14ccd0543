package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestNamesWithC1ControlsArePrintedQuoted: a tenant name holding a C1
// control character (U+0080..U+009F: U+009B is the one-character CSI
// that starts an escape sequence, U+0085 a line break) or a line
// separator is printed quoted, as one with an ESC is. printable relied on
// strconv.CanBackquote, which passes them: they went to the terminal as
// they were.
func TestNamesWithC1ControlsArePrintedQuoted(t *testing.T) {
	c, _, _ := newCLI(t)
	for _, name := range []string{"ev\u009b2Jil", "two\u0085lines", "para\u2028graph"} {
		out := c.mustRun("quota", "set", "-rate", "1", "-burst", "2", name)
		if strings.Contains(out, name) || !strings.Contains(out, strconv.Quote(name)+": quota set") {
			t.Errorf("quota set %+q printed %+q, want the name quoted", name, out)
		}
		if list := c.mustRun("quota", "list"); strings.Contains(list, name) {
			t.Errorf("quota list printed %+q as it is:\n%+q", name, list)
		}
	}
}

// TestLongNamesAreCutAt64Bytes: printable cuts a name over 64 bytes to
// at most 64 bytes of it (at a character's start) and marks the cut. It
// cut with fmt's %.64q, whose precision counts characters, not bytes: a
// name of 35 two-byte characters (70 bytes) was printed whole with "…"
// after it, as if cut, and one of 64 three-byte characters (192 bytes)
// printed all 192.
func TestLongNamesAreCutAt64Bytes(t *testing.T) {
	for _, name := range []string{strings.Repeat("é", 35), strings.Repeat("日", 64), strings.Repeat("x", 65), strings.Repeat("é", 32) + "x", strings.Repeat("\x80", 100)} {
		got := printable(name)
		shown, ok := strings.CutSuffix(got, "…")
		if !ok {
			t.Errorf("printable(%d bytes) = %q: no mark of the cut", len(name), got)
			continue
		}
		s, err := strconv.Unquote(shown)
		if err != nil || len(s) > 64 || !strings.HasPrefix(name, s) || len(s) < 62 {
			t.Errorf("printable(%d bytes) = %q: shows %d bytes (%v); want the name's first 62 to 64", len(name), got, len(s), err)
		}
	}
	if got := printable(strings.Repeat("é", 32)); got != strings.Repeat("é", 32) {
		t.Errorf("a 64-byte name printed as %q, want it whole", got)
	}
}
