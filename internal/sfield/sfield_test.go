package sfield

import (
	"strings"
	"testing"
)

func TestRateLimit(t *testing.T) {
	for _, c := range []struct {
		prefix string
		r, t   int64
		want   string
	}{
		{`"default";r=`, 49, 3, `"default";r=49;t=3`},
		{`"default";r=`, 0, -1, `"default";r=0`},
		{`"p";r=`, 5, 1 << 62, `"p";r=5;t=999999999999999`},
		// Too long for the shared buffer: its own string.
		{`"` + strings.Repeat("n", 60) + `";r=`, 7, 1, `"` + strings.Repeat("n", 60) + `";r=7;t=1`},
	} {
		v := RateLimit(c.prefix, c.r, c.t)
		if len(v) != 1 || cap(v) != 1 || v[0] != c.want {
			t.Errorf("RateLimit(%q, %d, %d) = %q (cap %d), want [%q]", c.prefix, c.r, c.t, v, cap(v), c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { RateLimit(`"default";r=`, 123456, 7) }); n != 1 {
		t.Errorf("RateLimit allocates %v times, want 1", n)
	}
}
