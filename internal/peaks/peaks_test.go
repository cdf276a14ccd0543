package peaks

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func entries(h *History) []Entry { return slices.Clone(h.Entries()) }

func TestPushKeepsOnlyPossibleAnswers(t *testing.T) {
	var h History
	h.Reset(100, 50)
	h.Push(100, 50) // the first acquire of a full bucket: same time, same level
	h.Push(110, 30)
	h.Push(120, 40) // drops (110, 30): every query that counts it counts 40
	h.Push(130, 10)
	want := []Entry{{100, 50}, {120, 40}, {130, 10}}
	if got := entries(&h); !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	for _, c := range []struct {
		after int64
		x     float64
		want  float64
	}{
		{99, 0, 50},  // a grant before the unknown past: the full level
		{100, 0, 40}, // the grant at 100 does not count its own level
		{115, 0, 40},
		{120, 0, 10},
		{130, 5, 5}, // nothing after: the level now
		{130, 0, 0},
		{110, 45, 45}, // the level now, if higher
	} {
		if got := h.Peak(c.after, c.x); got != c.want {
			t.Errorf("Peak(%d, %v) = %v, want %v", c.after, c.x, got, c.want)
		}
	}
}

func TestMergeJoinsTheSmallestDrop(t *testing.T) {
	var h History
	h.Reset(0, 1000)
	levels := []float64{900, 800, 790, 700, 600, 500, 400, 300} // 1000 and 8 more: one too many
	for i, l := range levels {
		// Only the last push, the ninth entry, merges.
		if merged := h.Push(int64(i+1)*10, l); merged != (i == len(levels)-1) {
			t.Fatalf("push %d of %v reported merged %v", i, l, merged)
		}
	}
	// The drop 800 -> 790 is the smallest: (20, 800) and (30, 790) become
	// (30, 800).
	want := []Entry{{0, 1000}, {10, 900}, {30, 800}, {40, 700}, {50, 600}, {60, 500}, {70, 400}, {80, 300}}
	if got := entries(&h); !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	if got := h.Peak(20, 0); got != 800 {
		t.Errorf("Peak(20) = %v, want 800: between the merged entries the higher level", got)
	}
	if got := h.Peak(30, 0); got != 700 {
		t.Errorf("Peak(30) = %v, want 700: after the merged entry it is exact", got)
	}
}

func TestRaise(t *testing.T) {
	var h History
	h.Reset(0, 100)
	h.Push(10, 60)
	h.Push(20, 50)
	h.Push(30, 20)
	h.Raise(15, 45) // (20, 50) and (30, 20) rise to 95 and 65; (10, 60) is below 95
	want := []Entry{{0, 100}, {20, 95}, {30, 65}}
	if got := entries(&h); !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	h.Raise(30, 5) // nothing after 30
	if got := entries(&h); !slices.Equal(got, want) {
		t.Fatalf("a raise after every entry changed %v", got)
	}
	h.Raise(-1, 1) // everything
	if got := entries(&h); !slices.Equal(got, []Entry{{0, 101}, {20, 96}, {30, 66}}) {
		t.Fatalf("a raise of every entry: %v", got)
	}
}

func TestGrantTime(t *testing.T) {
	const now = int64(1_800_000_000_000_000) // µs, in 2027
	grant := now - 1_234_567
	id := uint32(grant)
	for _, c := range []struct {
		name  string
		age   int64
		id    uint32
		want  int64
		exact bool
	}{
		{"no id", 2_000_000, 0, now - 2_000_000, false},
		{"id agrees with the age", 2_000_000, id, grant, true},
		{"age exactly to the grant", 1_234_567, id, grant, true},
		{"age too short: the id still tells the time", 1_000_000, id, grant, true},
		{"age too long to tell the id's time", 1 << 32, id, now - 1<<32, false},
		{"the longest age that tells it", 1<<32 - 1, id, grant, true},
		{"age 0: just before now", 0, 0, now - 1, false},
		{"an id of now itself", 5, uint32(now & (1<<32 - 1)), now - 1, false},
	} {
		if got := GrantTime(now, now, c.age, c.id); got != c.want {
			t.Errorf("%s: GrantTime = %d, want %d", c.name, got, c.want)
		}
	}
	// A bucket whose time runs 900 ms ahead of the clock (its refill
	// reserved): an age counts back from the clock, which it was measured
	// against; an id names the bucket's time, as before.
	clock := now - 900_000
	if got, want := GrantTime(now, clock, 2_000_000, 0), clock-2_000_000; got != want {
		t.Errorf("no id, frozen bucket: GrantTime = %d, want %d (the clock less the age)", got, want)
	}
	if got := GrantTime(now, clock, 2_000_000, id); got != grant {
		t.Errorf("an id, frozen bucket: GrantTime = %d, want the grant's %d", got, grant)
	}
}

func TestParse(t *testing.T) {
	var h History
	h.Reset(1_700_000_000_000_000, 100)
	h.Push(1_700_000_000_000_100, 99)
	h.Push(1_700_000_000_000_200, 0.1) // rounded up: 205/2048
	f := h.Fields()
	if !slices.Equal(f, []string{"1700000000000000:100", "1700000000000100:99", "1700000000000200:0.10009765625"}) {
		t.Fatalf("Fields = %q", f)
	}
	if got, ok := Parse(f); !ok || !slices.Equal(got.Entries(), h.Entries()) {
		t.Fatalf("Parse(Fields) = %v, %v; want %v", got.Entries(), ok, h.Entries())
	}
	// Lua's %.17g.
	if got, ok := Parse([]string{"5:0.10000000000000001"}); !ok || got.Entries()[0] != (Entry{5, 0.1}) {
		t.Fatalf("Parse of %%.17g: %v, %v", got.Entries(), ok)
	}
	for _, bad := range [][]string{
		nil, {"garbage"}, {"1:2", ""}, {"1:2", "1:1"}, {"1:2", "2:2"}, {"2:1", "1:0"}, {"1:nan"}, {"1:inf"}, {"1:-inf"}, {"x:1"}, {"1:1:1"},
		{"1:9", "2:8", "3:7", "4:6", "5:5", "6:4", "7:3", "8:2", "9:1"}, // more than Max
	} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestHistoryNeverUnderestimates checks the model against the full list of
// every call: for every query, Peak is at least the true highest level
// (so no release is credited more than the cap allows), equal to it with
// the levels rounded up as the model rounds them as long as no merge
// happened, and the history stays ordered and small and packs and unpacks
// to itself; an Unmerged history answers every query exactly.
func TestHistoryNeverUnderestimates(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var h History
		var u Unmerged
		start := rapid.Float64Range(0, 100).Draw(t, "start")
		h.Reset(0, start)
		u.Reset(0, start)
		all := []Entry{{0, start}}       // every call, raised as the model is
		up := []Entry{{0, Round(start)}} // the same, rounded up as the model rounds
		now := int64(0)
		merged := false
		query := func(after int64, x float64) {
			want := x
			for _, e := range all {
				if e.T > after {
					want = max(want, e.L)
				}
			}
			if got := u.Peak(after, x); got != want {
				t.Fatalf("Unmerged.Peak(%d, %v) = %v, want exactly %v; entries %v", after, x, got, want, u.e)
			}
			got := h.Peak(after, x)
			if got < want {
				t.Fatalf("Peak(%d, %v) = %v below the true %v; history %v", after, x, got, want, h.Entries())
			}
			rounded := x
			for _, e := range up {
				if e.T > after {
					rounded = max(rounded, e.L)
				}
			}
			if !merged && got != rounded {
				t.Fatalf("Peak(%d, %v) = %v, want exactly %v (%v rounded up) without merges; history %v", after, x, got, rounded, want, h.Entries())
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"Push": func(t *rapid.T) {
				now += rapid.Int64Range(0, 20).Draw(t, "dt")
				l := rapid.Float64Range(0, 100).Draw(t, "level")
				if h.Push(now, l) {
					merged = true
				}
				u.Push(now, l)
				all = append(all, Entry{now, l})
				up = append(up, Entry{now, Round(l)})
			},
			"Raise": func(t *rapid.T) {
				after := rapid.Int64Range(-1, now).Draw(t, "after")
				c := rapid.Float64Range(0, 10).Draw(t, "c")
				h.Raise(after, c)
				u.Raise(after, c)
				for i := range all {
					if all[i].T > after {
						all[i].L += c
						up[i].L = Round(up[i].L + c)
					}
				}
			},
			"Peak": func(t *rapid.T) {
				query(rapid.Int64Range(-1, now+1).Draw(t, "after"), rapid.Float64Range(0, 100).Draw(t, "x"))
			},
			"": func(t *rapid.T) {
				e := h.Entries()
				if len(e) == 0 || len(e) > Max {
					t.Fatalf("%d entries", len(e))
				}
				for i := 1; i < len(e); i++ {
					if e[i].T <= e[i-1].T || e[i].L >= e[i-1].L {
						t.Fatalf("history out of order: %v", e)
					}
				}
				if p, ok := Parse(h.Fields()); !ok || !slices.Equal(p.Entries(), e) {
					t.Fatalf("Parse(Fields) = %v, %v; want %v", p.Entries(), ok, e)
				}
				ts := now + rapid.Int64Range(0, 1e7).Draw(t, "ts")
				packed, ok := h.Pack(ts, 50) // levels above it too
				if p, b, ok2 := Unpack(packed, ts); !ok || !ok2 || b != 50 || !slices.Equal(p.Entries(), e) {
					t.Fatalf("Unpack(Pack) = %v, %d, %v, %v; want %v (packed %q)", p.Entries(), b, ok, ok2, e, packed)
				}
			},
		})
	})
}

// TestPackFits: a history whose packing passes MaxBytes is merged until it
// fits, which only raises what Peak answers; a burst or oldest level of
// Limit or more is not packed; and Unpack refuses what Pack never writes.
func TestPackFits(t *testing.T) {
	var h History
	burst := int64(1) << 50
	h.Reset(0, float64(burst))
	at := int64(0)
	for i := 1; i < Max; i++ {
		at += int64(1) << (40 + i) // gaps of 6 to 7 bytes
		h.Push(at, float64(burst-int64(i)<<(30+i)))
	}
	before := h
	packed, ok := h.Pack(at, burst)
	if !ok || len(packed) > MaxBytes || h.Len() >= before.Len() {
		t.Fatalf("Pack: %d bytes, %v, %d entries of %d; want at most %d bytes, merged", len(packed), ok, h.Len(), before.Len(), MaxBytes)
	}
	got, b, ok := Unpack(packed, at)
	if !ok || b != burst || !slices.Equal(got.Entries(), h.Entries()) {
		t.Fatalf("Unpack = %v, %d, %v; want %v", got.Entries(), b, ok, h.Entries())
	}
	for _, e := range before.Entries() {
		for _, after := range []int64{e.T - 1, e.T} {
			if p, q := got.Peak(after, 0), before.Peak(after, 0); p < q {
				t.Fatalf("Peak(%d) = %v after the merges, %v before", after, p, q)
			}
		}
	}
	var big History
	big.Reset(5, Limit)
	if _, ok := big.Pack(5, 10); ok {
		t.Fatal("an oldest level of Limit packed")
	}
	if _, ok := h.Pack(at, Limit); ok {
		t.Fatal("a burst of Limit packed")
	}
	for _, bad := range []string{
		"", "\x0a", "\x0a\x00", // no entry; an even count
		"\x0a\x00\x00\x01\x00",                         // a drop of 0
		"\x0a\x00\x01\x00\x00",                         // a gap of 0
		"\x0a\x02\xcc\x21\x01\x00",                     // a level below 0 (a drop of 4300 codes: Code(10) is 4257)
		"\x0a\x00\x80",                                 // cut off
		"\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00\x00", // 9 bytes
		"\x80\x80\x80\x80\x80\x80\x80\x10\x00\x00",     // 2^53
	} {
		if _, _, ok := Unpack(bad, 100); ok {
			t.Errorf("Unpack(%q) accepted", bad)
		}
	}
}

// TestRound: Round rounds up, by less than a token and less than a 128th
// of the level (below 2^-30: to 2^-30), keeps the grid's values (0, every
// integer up to 2^52) as they are, and rises with the level; Code and
// Level are each other's inverse on the grid.
func TestRound(t *testing.T) {
	for _, l := range []float64{0, 1, 2, 5, 100, 127, 128, 129, 1000, 1 << 40, Limit - 1} {
		if Round(l) != l {
			t.Errorf("Round(%v) = %v, want it kept", l, Round(l))
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		l := rapid.Float64Range(0, 1e6).Draw(t, "l")
		if rapid.Bool().Draw(t, "tiny") {
			l = math.Ldexp(l, -rapid.IntRange(10, 60).Draw(t, "shift"))
		}
		r := Round(l)
		if r < l || r-l >= 1 || (l >= 1.0/(1<<30) && r-l > l/128) || (l < 1.0/(1<<30) && r != 1.0/(1<<30) && l > 0) {
			t.Fatalf("Round(%v) = %v", l, r)
		}
		if Level(Code(r)) != r || Code(r) != Code(l) {
			t.Fatalf("Code(%v) = %d, Level = %v, Code(Round) = %d", l, Code(l), Level(Code(l)), Code(r))
		}
		m := l + rapid.Float64Range(0, 10).Draw(t, "more")
		if Code(m) < Code(l) || Round(m) < r {
			t.Fatalf("Round(%v) = %v below Round(%v) = %v", m, Round(m), l, r)
		}
	})
}
