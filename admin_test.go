package leasequota_test

import (
	"context"
	"errors"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

func TestSetGetDeleteQuota(t *testing.T) {
	store := setup(t)
	ctx := context.Background()
	def := leasequota.Quota{Rate: 1e-6, Burst: 3}
	l := newLimiter(t, store, leasequota.WithMaxWait(200*time.Millisecond), leasequota.WithDefaultQuota(def))

	huge := strings.Repeat("{}\n", 1<<20/3)
	for _, name := range []string{"plain", "", "{", "}", "a}b{c", "\x00\xff", huge} {
		if _, ok, err := l.GetQuota(ctx, name); ok || err != nil {
			t.Fatalf("%q: GetQuota before SetQuota = %v, %v", truncate(name), ok, err)
		}
		q := leasequota.Quota{Rate: 0.25, Burst: 5, MinLease: 2, MaxLease: 4, LeaseTTL: 3 * time.Second, FailureMode: leasequota.FailClosed}
		if err := l.SetQuota(ctx, name, q); err != nil {
			t.Fatal(err)
		}
		got, ok, err := l.GetQuota(ctx, name)
		if err != nil || !ok || got != q {
			t.Fatalf("%q: GetQuota = %+v, %v, %v; want %+v", truncate(name), got, ok, err, q)
		}
		// The bucket was full at the default burst 3; raising the burst to
		// 5 gives no free tokens: 3 admitted, then denied.
		for i := 0; i < 3; i++ {
			d := l.AllowN(ctx, name, 1)
			if !d.Allowed {
				t.Fatalf("%q: request %d denied: %+v", truncate(name), i, d)
			}
		}
		d := l.AllowN(ctx, name, 1)
		if d.Allowed {
			t.Errorf("%q: fourth request admitted: the burst change refilled for free", truncate(name))
		}
		if d.Quota.Rate != q.Rate || d.Quota.Burst != q.Burst || d.Quota.LeaseTTL != q.LeaseTTL || d.Quota.FailureMode != q.FailureMode {
			t.Errorf("%q: Decision.Quota = %+v, want the override %+v", truncate(name), d.Quota, q)
		}
		if err := l.DeleteQuota(ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := l.GetQuota(ctx, name); ok || err != nil {
			t.Fatalf("%q: GetQuota after DeleteQuota = %v, %v", truncate(name), ok, err)
		}
		// The instance goes back to the configured quota on its next call.
		deadline := time.Now().Add(5 * time.Second)
		for {
			info, _ := l.Tenant(name)
			if info.Quota.Rate == def.Rate && info.Quota.Burst == def.Burst {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q: quota still %+v after DeleteQuota", truncate(name), info.Quota)
			}
			l.Allow(name)                    // a denial makes a lease call
			time.Sleep(5 * time.Millisecond) // polling pace
		}
	}
	if err := l.DeleteQuota(ctx, "never-set"); err != nil {
		t.Errorf("DeleteQuota of a tenant without override: %v", err)
	}
}

func TestSetQuotaRejectsInvalid(t *testing.T) {
	store := setup(t)
	ctx := context.Background()
	l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	for _, q := range []leasequota.Quota{
		{},
		{Rate: math.NaN(), Burst: 1},
		{Rate: math.Inf(1), Burst: 1},
		{Rate: -1, Burst: 1},
		{Rate: 1, Burst: 0},
		{Rate: 1, Burst: 2, MaxLease: 3},
		{Rate: 1, Burst: 2, MinLease: 2, MaxLease: 1},
		{Rate: 1, Burst: 2, LeaseTTL: time.Millisecond}, // below twice the interval
		{Rate: 1, Burst: 2, FailureMode: 99},
	} {
		if err := l.SetQuota(ctx, "t", q); !errors.Is(err, leasequota.ErrInvalidQuota) {
			t.Errorf("SetQuota(%+v) = %v, want ErrInvalidQuota", q, err)
		}
	}
	if _, ok, err := l.GetQuota(ctx, "t"); ok || err != nil {
		t.Errorf("an invalid quota was stored: %v, %v", ok, err)
	}
}

// TestAdminErrorsHaveOnePrefix checks that the errors of SetQuota and
// DeleteQuota name the package once, whatever they wrap (a sentinel, the
// store's error), and that errors.Is still finds what they wrap. The
// errors of package lease and of go-redis, and a reply GetQuota cannot
// parse, are integration's TestAdminErrorsHaveOnePrefix.
func TestAdminErrorsHaveOnePrefix(t *testing.T) {
	store := setup(t)
	ctx := context.Background()
	l := newLimiter(t, store, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		if tenant == "bad" {
			return leasequota.Quota{Rate: 1} // no Burst
		}
		return leasequota.Quota{Rate: 1, Burst: 1}
	}))
	canceled, cancel := context.WithCancel(ctx)
	cancel()

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
			`leasequota: SetQuota("acme"): …`},
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

// TestListQuotas lists what SetQuota stored, as given, and nothing after
// DeleteQuota; a done ctx ends the listing with its error.
func TestListQuotas(t *testing.T) {
	store := setup(t)
	ctx := context.Background()
	l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	long := strings.Repeat("long", 100)
	want := map[string]leasequota.Quota{
		"acme": {Rate: 0.25, Burst: 5, MinLease: 2, MaxLease: 4, LeaseTTL: 3 * time.Second, FailureMode: leasequota.FailClosed},
		"":     {Rate: 1, Burst: 2},
		long:   {Rate: 3, Burst: 4},
		"gone": {Rate: 5, Burst: 6},
	}
	for tenant, q := range want {
		if err := l.SetQuota(ctx, tenant, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.DeleteQuota(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	delete(want, "gone")
	got := map[string]leasequota.Quota{}
	for tq, err := range l.ListQuotas(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if tq.Key == "" {
			t.Errorf("%.20q listed without a key", tq.Tenant)
		}
		got[tq.Tenant] = tq.Quota
	}
	if !maps.Equal(got, want) {
		t.Fatalf("ListQuotas = %v, want %v", got, want)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	n := 0
	for _, err := range l.ListQuotas(done) {
		n++
		if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "leasequota: ListQuotas: ") || strings.Count(err.Error(), "memstore") > 0 {
			t.Errorf("ListQuotas with a done ctx: %v; want one error wrapping context.Canceled, with one package prefix", err)
		}
	}
	if n != 1 {
		t.Errorf("ListQuotas with a done ctx yielded %d values, want 1", n)
	}
}
