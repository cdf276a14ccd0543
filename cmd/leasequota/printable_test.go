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
