package sfield

import (
	"strconv"
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
		{`"default";r=`, 0, 0, `"default";r=0;t=0`},
		{`"default";r=`, -3, 9, `"default";r=0;t=9`},
		{`"default";r=`, 12345678, 0, `"default";r=12345678;t=0`},
		{`"default";r=`, 123456789, 0, `"default";r=123456789;t=0`},
		{`"default";r=`, MaxInteger, 0, `"default";r=999999999999999;t=0`},
		{`"default";r=`, 1 << 62, 10, `"default";r=999999999999999;t=10`},
		// Prefix's fast path up to 32 bytes: a 13-byte prefix with 15 digits,
		// a 16-byte one with 12; then RateLimit's.
		{`"defaul1";r=`, MaxInteger, 0, `"defaul1";r=999999999999999;t=0`},
		{`"abcdefghij";r=`, 999_999_999_999, 0, `"abcdefghij";r=999999999999;t=0`},
		{`"abcdefghij";r=`, 9_999_999_999_999, 0, `"abcdefghij";r=9999999999999;t=0`},
		{`"abcdefghijk";r=`, 1, 0, `"abcdefghijk";r=1;t=0`},
		{`"p";r=`, 5, 1 << 62, `"p";r=5;t=999999999999999`},
		// 33 to 48 bytes: the larger of the two field sizes.
		{`"` + strings.Repeat("n", 20) + `";r=`, 1099511627776, 0, `"` + strings.Repeat("n", 20) + `";r=1099511627776;t=0`},
		// Too long for the shared buffer: its own string.
		{`"` + strings.Repeat("n", 60) + `";r=`, 7, 1, `"` + strings.Repeat("n", 60) + `";r=7;t=1`},
	} {
		v := RateLimit(c.prefix, c.r, c.t)
		if len(v) != 1 || cap(v) != 1 || v[0] != c.want {
			t.Errorf("RateLimit(%q, %d, %d) = %q (cap %d), want [%q]", c.prefix, c.r, c.t, v, cap(v), c.want)
		}
		p := NewPrefix(c.prefix)
		if v := p.RateLimit(c.r, c.t); len(v) != 1 || cap(v) != 1 || v[0] != c.want {
			t.Errorf("NewPrefix(%q).RateLimit(%d, %d) = %q (cap %d), want [%q]", c.prefix, c.r, c.t, v, cap(v), c.want)
		}
	}
	// Slice and value are one allocation, up to 48 bytes of value.
	for _, c := range []struct {
		prefix string
		want   float64
	}{{`"default";r=`, 1}, {`"` + strings.Repeat("n", 20) + `";r=`, 1}} {
		if n := testing.AllocsPerRun(420, func() { RateLimit(c.prefix, 1099511627776, 7) }); n != c.want {
			t.Errorf("RateLimit(%q, ...) allocates %v times, want %v", c.prefix, n, c.want)
		}
		p := NewPrefix(c.prefix)
		if n := testing.AllocsPerRun(420, func() { p.RateLimit(1099511627776, 0) }); n != c.want {
			t.Errorf("NewPrefix(%q).RateLimit(...) allocates %v times, want %v", c.prefix, n, c.want)
		}
	}
}

var sink []string

// BenchmarkRateLimit builds the value of an admitted request of the
// middleware's benchmarks: 13 digits of r (their Burst is 2^40), t=0.
func BenchmarkRateLimit(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = RateLimit(`"default";r=`, 1099511627776, 0)
	}
}

func TestMemberFormatsOncePerQuota(t *testing.T) {
	var m Member
	if f := m.Cached(10, 1); f != nil {
		t.Fatalf("Cached of an empty Member = %q, want nil", f)
	}
	calls := 0
	format := func(s string) func() string { return func() string { calls++; return s } }
	a := m.Field(10, 1, format("a"))
	if b := m.Field(10, 1, format("b")); &b[0] != &a[0] || calls != 1 {
		t.Fatalf("same quota: %q (formatted %d times), want the cached %q once", b, calls, a)
	}
	if c := m.Field(20, 1, format("c")); c[0] != "c" || calls != 2 {
		t.Fatalf("another quota: %q (formatted %d times), want \"c\", formatted anew", c, calls)
	}
	if d := m.Field(20, 2, format("d")); d[0] != "d" || calls != 3 {
		t.Fatalf("another rate: %q (formatted %d times), want \"d\"", d, calls)
	}
	if f := m.Cached(20, 2); len(f) != 1 || f[0] != "d" {
		t.Fatalf("Cached(20, 2) = %q, want the last member [\"d\"]", f)
	}
	if f := m.Cached(20, 1); f != nil {
		t.Fatalf("Cached(20, 1) = %q, want nil: the last quota is another", f)
	}
}

// digitsOf returns what putDigits wrote for u: its significant digits.
func digitsOf(u uint64) string {
	var b [16]byte
	i := putDigits(&b, u)
	return string(b[i:])
}

func TestPutDigits(t *testing.T) {
	for _, u := range []uint64{0, 1, 9, 10, 99, 100, 101, 9999, 10000, 99_999_999, 100_000_000, 100_000_001,
		1 << 40, 123_456_789_012_345, MaxInteger, 9_999_999_999_999_999} {
		if got, want := digitsOf(u), strconv.FormatUint(u, 10); got != want {
			t.Errorf("putDigits(%d) wrote %q, want %q", u, got, want)
		}
	}
	// Every value of each four-digit lane, in both halves of a word
	// (the lanes are independent: digits8 splits all at once).
	for x := range uint64(10000) {
		for _, u := range []uint64{x, x * 10000, x*1e8 + x, x*1e12 + 99_999_999} {
			if got, want := digitsOf(u), strconv.FormatUint(u, 10); got != want {
				t.Fatalf("putDigits(%d) wrote %q, want %q", u, got, want)
			}
		}
	}
}

// FuzzPutDigits holds putDigits to strconv below 1e16, and RateLimit and
// Prefix.RateLimit, for names of 0 to 31 bytes, to the value written with
// strconv.
func FuzzPutDigits(f *testing.F) {
	for i, u := range []uint64{0, 7, 100, 1 << 40, MaxInteger, 1e16 - 1} {
		f.Add(u, int64(u%20)-1, uint8(i*4))
	}
	f.Fuzz(func(t *testing.T, u uint64, tt int64, k uint8) {
		u %= 1e16
		if got, want := digitsOf(u), strconv.FormatUint(u, 10); got != want {
			t.Fatalf("putDigits(%d) wrote %q, want %q", u, got, want)
		}
		prefix := `"` + strings.Repeat("n", int(k%32)) + `";r=`
		r := int64(u) - 5e15 // negatives too, clamped to 0
		want := prefix + strconv.FormatInt(min(max(r, 0), MaxInteger), 10)
		if tt >= 0 {
			want += ";t=" + strconv.FormatInt(min(tt, MaxInteger), 10)
		}
		if v := RateLimit(prefix, r, tt); len(v) != 1 || v[0] != want {
			t.Fatalf("RateLimit(%q, %d, %d) = %q, want %q", prefix, r, tt, v, want)
		}
		p := NewPrefix(prefix)
		if v := p.RateLimit(r, tt); len(v) != 1 || v[0] != want {
			t.Fatalf("NewPrefix(%q).RateLimit(%d, %d) = %q, want %q", prefix, r, tt, v, want)
		}
		// And t of 0 to 9, Prefix.RateLimit's fast path for short names.
		t1 := int64(k % 10)
		want = prefix + strconv.FormatInt(min(max(r, 0), MaxInteger), 10) + ";t=" + strconv.FormatInt(t1, 10)
		if v := p.RateLimit(r, t1); len(v) != 1 || v[0] != want {
			t.Fatalf("NewPrefix(%q).RateLimit(%d, %d) = %q, want %q", prefix, r, t1, v, want)
		}
	})
}
