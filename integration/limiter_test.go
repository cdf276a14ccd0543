package integration

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// The tests in this file are the Redis halves of root package tests of the
// same names, which run the Limiter on the in-process store: what New
// checks of its Redis wiring, the tenants' Redis keys, and the errors of
// package lease and go-redis as the admin methods report them.

// newRedisLimiter returns a limiter on c under prefix, closed when the
// test ends, logging to the test's log.
func newRedisLimiter(t *testing.T, c redis.UniversalClient, prefix string, opts ...leasequota.Option) *leasequota.Limiter {
	t.Helper()
	opts = append([]leasequota.Option{leasequota.WithKeyPrefix(prefix), leasequota.WithLogger(redistest.Logger(t))}, opts...)
	l, err := leasequota.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return l
}

// truncName shortens a tenant name for a message.
func truncName(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}

// TestNewRejectsBadOptions: what New checks of its Redis wiring, beyond
// the options every store shares (the root package's
// TestNewRejectsBadOptions): a nil client, and a key prefix that would
// break the tenants' hash tags. New contacts no Redis to refuse them.
func TestNewRejectsBadOptions(t *testing.T) {
	leakCheck(t)
	c := redistest.Client(t)
	good := leasequota.Quota{Rate: 10, Burst: 10}
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []leasequota.Option
		is     error
		says   string
	}{
		{"prefix with brace", c, []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithKeyPrefix("a{b")}, leasequota.ErrInvalidOption, "WithKeyPrefix"},
		{"prefix with closing brace", c, []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithKeyPrefix("a}")}, leasequota.ErrInvalidOption, "WithKeyPrefix"},
		{"nil client", nil, []leasequota.Option{leasequota.WithDefaultQuota(good)}, leasequota.ErrInvalidOption, "nil redis client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := leasequota.New(tc.client, tc.opts...)
			if err == nil {
				l.Close(context.Background())
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not name %q", err, tc.says)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "leasequota: ") || strings.Count(msg, ": ") > 0 &&
				(strings.Count(msg, "leasequota:") != 1 || strings.Contains(msg, "lease:")) {
				t.Errorf("error %q: want exactly one package prefix, leasequota:, at its start", msg)
			}
		})
	}
}

// TestHostileTenantNames: every byte string is a tenant of its own in
// Redis: one bucket key each, in its own hash tag, and a long name hashed
// into a short key. (The root package's TestHostileTenantNames checks the
// same admissions on the in-process store.)
func TestHostileTenantNames(t *testing.T) {
	leakCheck(t)
	c, prefix := redistest.Client(t), redistest.Prefix(t)
	// WithMaxWait: a request that finds the lease empty waits for a fresh
	// one, so each tenant's whole burst is admitted whatever the lease size.
	// The names, not the timing, are the subject: a second for a call and
	// ten for a first lease, where the defaults (50 ms, 100 ms) denied a
	// tenant cold_start under -race beside other tests on both cores.
	l := newRedisLimiter(t, c, prefix, leasequota.WithMaxWait(200*time.Millisecond),
		leasequota.WithRedisTimeout(time.Second), leasequota.WithColdStartWait(10*time.Second),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-6, Burst: 3}))
	huge := strings.Repeat("{}\n", 1<<20/3)
	names := []string{"", "{", "}", "{}", "a}b{c", "\n", "\x00", "\xff\xfe", huge, huge + "x"}
	ctx := context.Background()
	for _, name := range names {
		for i := 0; i < 3; i++ {
			if d := l.AllowN(ctx, name, 1); !d.Allowed {
				t.Errorf("tenant %q request %d denied: %+v", truncName(name), i, d)
			}
		}
		// Each tenant has its own bucket of 3: the fourth is denied.
		if l.Allow(name) {
			t.Errorf("tenant %q: fourth request admitted with burst 3", truncName(name))
		}
	}
	all, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string // bucket keys, without the instance registries and the fleet's roster
	for _, k := range all {
		if !strings.HasSuffix(k, ":i") && k != lease.RosterKey(prefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) != len(names) {
		t.Errorf("%d keys for %d tenants", len(keys), len(names))
	}
	for _, k := range keys {
		if len(k) > 1024 {
			t.Errorf("key of %d bytes: long names must be hashed", len(k))
		}
	}
}

// TestAdminErrorsHaveOnePrefix checks that the errors of SetQuota,
// GetQuota and DeleteQuota name the package once, whatever they wrap (a
// sentinel, an error of package lease, an error of go-redis), and that
// errors.Is still finds what they wrap. (The root package's test of the
// same name checks the errors that do not come from Redis, on the
// in-process store.)
func TestAdminErrorsHaveOnePrefix(t *testing.T) {
	leakCheck(t)
	c, prefix := redistest.Client(t), redistest.Prefix(t)
	ctx := context.Background()
	l := newRedisLimiter(t, c, prefix, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		if tenant == "bad" {
			return leasequota.Quota{Rate: 1} // no Burst
		}
		return leasequota.Quota{Rate: 1, Burst: 1}
	}))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	// A quota override that GetQuota cannot parse.
	corrupt := lease.QuotaKey(lease.Key(prefix, "corrupt"))
	if err := c.HSet(ctx, corrupt, "r", "x", "b", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), corrupt) })
	_, _, getErr := l.GetQuota(ctx, "corrupt")

	for _, tc := range []struct {
		err  error
		is   error
		want string // the message, or its start when it ends with "…"
	}{
		{l.SetQuota(ctx, "acme", leasequota.Quota{Rate: math.NaN(), Burst: 1}), leasequota.ErrInvalidQuota,
			`leasequota: invalid quota: SetQuota("acme"): Rate is NaN, want a finite number in (0, 1e+12]`},
		{l.SetQuota(ctx, "acme", leasequota.Quota{Rate: 1, Burst: 1, LeaseTTL: time.Millisecond}), leasequota.ErrInvalidQuota,
			`leasequota: invalid quota: SetQuota("acme"): LeaseTTL 1ms is below twice the refresh interval 100ms`},
		{l.DeleteQuota(ctx, "bad"), leasequota.ErrInvalidQuota,
			`leasequota: invalid quota: DeleteQuota("bad"): Burst is 0, want 1..1099511627776`},
		{l.SetQuota(canceled, "acme", leasequota.Quota{Rate: 1, Burst: 1}), context.Canceled,
			`leasequota: SetQuota("acme"): set quota: context canceled`},
		{getErr, lease.ErrBadReply, `leasequota: GetQuota("corrupt"): unexpected script reply: get quota: rate: …`},
	} {
		if tc.err == nil {
			t.Errorf("no error, want %q", tc.want)
			continue
		}
		msg := tc.err.Error()
		if n := strings.Count(msg, "leasequota:"); n != 1 || !strings.HasPrefix(msg, "leasequota: ") {
			t.Errorf("%q: want one %q prefix, got %d", msg, "leasequota: ", n)
		}
		if strings.Contains(msg, "lease:") {
			t.Errorf("%q: names package lease", msg)
		}
		if want, ok := strings.CutSuffix(tc.want, "…"); ok && !strings.HasPrefix(msg, want) || !ok && msg != tc.want {
			t.Errorf("error %q, want %q", msg, tc.want)
		}
		if tc.is != nil && !errors.Is(tc.err, tc.is) {
			t.Errorf("%q: errors.Is(%v) is false", msg, tc.is)
		}
	}
}
