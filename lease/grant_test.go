package lease

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		tokens float64
		need   int64
		rate   float64
		want   time.Duration
	}{
		{tokens: 5, need: 5, rate: 1, want: 0},
		{tokens: 7.5, need: 5, rate: 1, want: 0},
		{tokens: 0, need: 0, rate: 1, want: 0},
		{tokens: 0, need: -3, rate: 1, want: 0},
		{tokens: 0.5, need: 5, rate: 1, want: 4500 * time.Millisecond},
		{tokens: 0, need: 1, rate: 3, want: 333334 * time.Microsecond}, // 333333.33µs rounded up
		{tokens: 0, need: 1, rate: 1e12, want: time.Microsecond},       // 1ps rounded up to 1µs
		{tokens: 4.75, need: 5, rate: 1, want: 250 * time.Millisecond},
		{tokens: 0, need: 100, rate: 100, want: time.Second},
		{tokens: 0, need: 1, rate: 0, want: math.MaxInt64},
		{tokens: 0, need: 1, rate: -1, want: math.MaxInt64},
		{tokens: 0, need: 1, rate: math.NaN(), want: math.MaxInt64},
		{tokens: 0, need: 1, rate: math.Inf(1), want: math.MaxInt64},
		{tokens: 0, need: 1 << 40, rate: 1e-9, want: math.MaxInt64}, // ~35 million years
		{tokens: 0, need: 9223372036, rate: 1, want: 9223372036 * time.Second},
		{tokens: 0, need: 9223372037, rate: 1, want: math.MaxInt64}, // just past what a Duration holds
	} {
		g := Grant{Tokens: tc.tokens}
		if got := g.RetryAfter(tc.need, tc.rate); got != tc.want {
			t.Errorf("Grant{Tokens: %v}.RetryAfter(%d, %v) = %v, want %v", tc.tokens, tc.need, tc.rate, got, tc.want)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{
		{Rate: 1, Burst: 1},
		{Rate: 1e-9, Burst: 10},
		{Rate: MaxRate, Burst: MaxBurst},
		{Rate: math.SmallestNonzeroFloat64, Burst: 1},
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	for _, tc := range []struct {
		l     Limits
		field string
	}{
		{Limits{Rate: math.NaN(), Burst: 1}, "Rate"},
		{Limits{Rate: math.Inf(1), Burst: 1}, "Rate"},
		{Limits{Rate: math.Inf(-1), Burst: 1}, "Rate"},
		{Limits{Rate: 0, Burst: 1}, "Rate"},
		{Limits{Rate: -1, Burst: 1}, "Rate"},
		{Limits{Rate: MaxRate * 1.0001, Burst: 1}, "Rate"},
		{Limits{Rate: 1, Burst: 0}, "Burst"},
		{Limits{Rate: 1, Burst: -1}, "Burst"},
		{Limits{Rate: 1, Burst: MaxBurst + 1}, "Burst"},
	} {
		err := tc.l.Validate()
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want ErrBadRequest naming %s", tc.l, err, tc.field)
		}
	}
}

func TestParseReplies(t *testing.T) {
	ctx := context.Background()
	reply := func(v interface{}, err error) *redis.Cmd {
		c := redis.NewCmd(ctx)
		if err != nil {
			c.SetErr(err)
		} else {
			c.SetVal(v)
		}
		return c
	}
	const now = int64(1_700_000_000_123_456)

	g, err := parseGrant(reply("3 6.25 1700000000123456 2  0  0 ", nil), 5)
	if err != nil || g.Granted != 3 || g.Tokens != 6.25 || !g.ServerTime.Equal(time.UnixMicro(now)) || g.Instances != 2 ||
		g.Share != 0 || g.Reserved != 0 || g.Override != nil || g.RateShare.Held() || g.Wait != 0 {
		t.Errorf("parseGrant = %+v, %v", g, err)
	}
	// Every field: a share, a reservation at a pace, a wait, a rate share
	// and an override.
	g, err = parseGrant(reply("7 0.5 1700000000123456 4 12.5 4 12.5 250 10/1700000000000000/1700000010000000 20 40 1 5 2000000000 2", nil), 3)
	wantOverride := Override{Rate: 20, Burst: 40, MinLease: 1, MaxLease: 5, LeaseTTL: 2 * time.Second, Mode: 2}
	if err != nil || g.Granted != 7 || g.Tokens != 0.5 || g.Instances != 4 || g.Share != 12.5 || g.Reserved != 4 || g.Pace != 12.5 ||
		g.Wait != 250*time.Microsecond || g.RateShare.Rate != 10 || g.RateShare.From.UnixMicro() != 1_700_000_000_000_000 ||
		g.RateShare.Until.UnixMicro() != 1_700_000_010_000_000 || g.Override == nil || *g.Override != wantOverride {
		t.Errorf("parseGrant(every field) = %+v, %v", g, err)
	}
	for _, v := range []interface{}{
		nil, int64(3), "", "x",
		[]interface{}{int64(3), "6.25", now, int64(2)}, // an earlier release's array
		"3 6.25 1700000000123456 2  0  0",              // 8 fields
		"3 6.25 1700000000123456 2  0  0  ",            // 10
		"3 6.25 1700000000123456 2  0  0  20 40 1 5 2000000000 2 x",
		"3 6.25 1700000000123456 2  0  0  20 40 1 5 2000000000", // 14
		"three 6.25 1700000000123456 2  0  0 ",
		"3 nan 1700000000123456 2  0  0 ",
		"3 inf 1700000000123456 2  0  0 ",
		"3 6.25 1.5 2  0  0 ",
		"3 6.25 1700000000123456 x  0  0 ",
		"3 6.25 1700000000123456 -1  0  0 ",
		"6 6.25 1700000000123456 1  0  0 ",  // more than wanted
		"-1 6.25 1700000000123456 1  0  0 ", // negative
		"3 6.25 1700000000123456 1 -2 0  0 ",
		"3 6.25 1700000000123456 1  4  0 ",                          // reserved without a pace
		"3 6.25 1700000000123456 1  4 0 0 ",                         // a pace of 0
		"3 6.25 1700000000123456 1  9 1 0 ",                         // reserved more than granted
		"3 6.25 1700000000123456 1  0  -1 ",                         // a negative wait
		"3 6.25 1700000000123456 1  0  0 10/5",                      // a rate share without its end
		"3 6.25 1700000000123456 1  0  0  0 40 1 5 2000000000 2",    // an override of rate 0
		"3 6.25 1700000000123456 1  0  0  20 40 1 5 2000000000 300", // mode out of range
	} {
		if _, err := parseGrant(reply(v, nil), 5); !errors.Is(err, ErrBadReply) {
			t.Errorf("parseGrant(%#v) = %v, want ErrBadReply", v, err)
		}
	}
	if _, err := parseGrant(reply(nil, fakeRedisError("leasequota: bad argument: rate")), 1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("script argument error: %v, want ErrBadRequest", err)
	}
	if _, err := parseGrant(reply(nil, fakeRedisError("ERR other")), 1); err == nil || errors.Is(err, ErrBadRequest) {
		t.Errorf("other error: %v", err)
	}

	r, err := parseRelease(reply("9.5 1700000000123456 2.25", nil), 3)
	if err != nil || r.Tokens != 9.5 || r.Credited != 2.25 || !r.ServerTime.Equal(time.UnixMicro(now)) {
		t.Errorf("parseRelease = %+v, %v", r, err)
	}
	if r, err := parseRelease(reply("9.5 1700000000123456 3", nil), 3); err != nil || r.Credited != 3 {
		t.Errorf("parseRelease(all credited) = %+v, %v", r, err)
	}
	for _, v := range []interface{}{
		nil, "", "x", "9.5", "9.5 1700000000123456",
		[]interface{}{"9.5", now, "2.25"}, // an earlier release's array
		"x 1700000000123456 0",
		"9.5 y 0",
		"9.5 1.5 0",
		"9.5 1700000000123456 nan",
		"9.5 1700000000123456 z",
		"9.5 1700000000123456 3.5", // more than returned
		"9.5 1700000000123456 -0.5",
		"9.5 1700000000123456 1 extra",
		"9.5  1700000000123456 1",
	} {
		if _, err := parseRelease(reply(v, nil), 3); !errors.Is(err, ErrBadReply) {
			t.Errorf("parseRelease(%#v) = %v, want ErrBadReply", v, err)
		}
	}
	if _, err := parseRelease(reply(nil, fakeRedisError("leasequota: bad argument: age")), 1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("release script argument error: %v, want ErrBadRequest", err)
	}

	// quota.lua's set and del reply.
	if tok, err := parseLevel("set quota", reply([]interface{}{"4.5", now}, nil)); err != nil || tok != 4.5 {
		t.Errorf("parseLevel = %v, %v", tok, err)
	}
	for _, v := range []interface{}{nil, []interface{}{"4.5"}, []interface{}{"x", now}, []interface{}{"4.5", "y"}, []interface{}{"4.5", now, "0"}} {
		if _, err := parseLevel("set quota", reply(v, nil)); !errors.Is(err, ErrBadReply) {
			t.Errorf("parseLevel(%#v) = %v, want ErrBadReply", v, err)
		}
	}
}
