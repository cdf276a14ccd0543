package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestOverrideTextsTheScriptsRefuseAreBadReplies: an override whose
// fields Go's strconv reads but the scripts' override_problem refuses (a
// sign, Go's digit separators, a hex float) is corrupt to every acquire
// (read_override: "corrupt quota"), so GetOverride, Inspect and
// ListOverrides report it as a bad reply, as they report a rate of "abc".
// They read "+5", "1_000" and "0x1p4" as 5, 1000 and 16: `leasequota quota
// get` and `quota list` showed a valid override, exit 0, while every lease
// call of the tenant failed on it.
func TestOverrideTextsTheScriptsRefuseAreBadReplies(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	base := Limits{Rate: 1, Burst: 100}
	good := map[string]string{"r": "5", "b": "10", "min": "0", "max": "0", "ttl": "0", "mode": "0"}
	cases := []struct{ field, text string }{
		{"r", "+5"}, {"r", "1_000"}, {"r", "0x1p4"}, {"r", "5e+0_1"},
		{"b", "+10"}, {"min", "+0"}, {"max", "+1"}, {"ttl", "+0"}, {"mode", "+0"},
	}
	for i, tc := range cases {
		tenant := fmt.Sprintf("t%d", i)
		qkey := QuotaKey(c.Key(tenant))
		fields := []any{"n", tenant}
		for f, v := range good {
			if f == tc.field {
				v = tc.text
			}
			fields = append(fields, f, v)
		}
		if err := rdb.HSet(ctx, qkey, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		// The scripts refuse it.
		if _, err := c.Acquire(ctx, tenant, base, 1); err == nil || !strings.Contains(err.Error(), "corrupt quota") {
			t.Fatalf("%s %q: acquire = %v, want the scripts' corrupt quota", tc.field, tc.text, err)
		}
		if o, err := c.GetOverride(ctx, tenant); !errors.Is(err, ErrBadReply) {
			t.Errorf("%s %q: GetOverride = %+v, %v; want a bad reply", tc.field, tc.text, o, err)
		}
		if in, err := c.Inspect(ctx, tenant); !errors.Is(err, ErrBadReply) {
			t.Errorf("%s %q: Inspect = override %+v, %v; want a bad reply", tc.field, tc.text, in.Override, err)
		}
		listed := false
		for lo, err := range c.ListOverrides(ctx) {
			if lo.Key != qkey {
				continue
			}
			listed = true
			if !errors.Is(err, ErrBadReply) {
				t.Errorf("%s %q: listed as %+v, %v; want a bad reply", tc.field, tc.text, lo.Override, err)
			}
		}
		if !listed {
			t.Errorf("%s %q: not listed", tc.field, tc.text)
		}
		if err := rdb.Del(ctx, qkey).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOverrideTextRulesMatchTheScripts: decimalText and digitsText accept
// the texts common.lua's decimal and digits accept, no more, no fewer.
func TestOverrideTextRulesMatchTheScripts(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	src := commonSource + "\nreturn {decimal(ARGV[1]) and 1 or 0, digits(ARGV[1]) and 1 or 0}"
	texts := []string{"", "5", "05", "5.", ".5", ".", "5.5.5", "+5", "-5", " 5", "5 ", "1_000", "0x10", "0x1p4",
		"1e5", "1E5", "1e+5", "1e-5", "1e", "e5", ".e5", "5.e5", ".5e5", "1e5.0", "1e+-5", "1e5e3", "1E5e3",
		"inf", "nan", "Infinity", "1,5", "١", "9223372036854775807", "9223372036854775808", "00000000000000000001", "1e00000000000000000000001"}
	for _, s := range texts {
		v, err := rdb.Eval(ctx, src, nil, s).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if got := []int64{b2i(decimalText(s)), b2i(digitsText(s))}; got[0] != v[0] || got[1] != v[1] {
			t.Errorf("%q: Go decimal, digits = %v, Lua %v", s, got, v)
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
