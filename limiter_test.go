package leasequota_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// The tests of this package run the Limiter on the in-process store
// (lease/memstore, which the conformance suite in integration/ holds to the
// Redis scripts' semantics), and on internal/faultstore for outages: no
// Redis. What is about Redis itself (the scripts, key encoding, go-redis,
// the network) is tested in lease/ and integration/.

// setup returns a fresh in-process store (the global buckets, as an empty
// Redis) and registers a goroutine leak check that runs after the test's
// cleanups (so after the limiters it creates are closed).
func setup(t *testing.T) *memstore.Store {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	return memstore.New()
}

// newLimiter returns a limiter on b, closed when the test ends.
func newLimiter(t *testing.T, b leasequota.Backend, opts ...leasequota.Option) *leasequota.Limiter {
	t.Helper()
	// Logs go to t.Log; a test's own WithLogger, later, wins.
	opts = append([]leasequota.Option{leasequota.WithLogger(testLogger(t))}, opts...)
	l, err := leasequota.NewWithStore(b, opts...)
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

// requestUntilDegraded asks l for one token of tenant "a" every 10 ms
// until l reports Degraded, and fails the test with what after 1,000
// requests: in a synctest bubble, the opening of the breaker by an outage
// the caller has just started.
func requestUntilDegraded(t *testing.T, l *leasequota.Limiter, what string) {
	t.Helper()
	for i := 0; !l.Degraded(); i++ {
		if i > 1000 {
			t.Fatal(what)
		}
		l.AllowN(context.Background(), "a", 1)
		time.Sleep(10 * time.Millisecond)
	}
}

// globalTokens reads a tenant's global bucket as stored (not refilled
// since its last call), as HGET of its tk field reads it in Redis.
func globalTokens(t *testing.T, s *memstore.Store, tenant string) float64 {
	t.Helper()
	b := s.Tenant(tenant).Bucket
	if b == nil {
		t.Fatalf("tenant %q has no bucket in the store", tenant)
	}
	return b.Tokens
}

// untouched reports whether the store keeps nothing for tenant: no call
// created its bucket or registered an instance on it.
func untouched(s *memstore.Store, tenant string) bool {
	st := s.Tenant(tenant)
	return st.Bucket == nil && st.Instances == nil && st.Releases == nil && st.Override == nil
}

// TestNewRejectsBadOptions: the options' validation, whatever the store.
// What only New(redisClient) checks (a nil client, the key prefix) is in
// integration's TestNewRejectsBadOptions.
func TestNewRejectsBadOptions(t *testing.T) {
	store := setup(t)
	good := leasequota.Quota{Rate: 10, Burst: 10}
	cases := []struct {
		name string
		opts []leasequota.Option
		is   error
		says string
	}{
		{"no quota", nil, leasequota.ErrInvalidOption, "WithDefaultQuota"},
		{"NaN rate", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: math.NaN(), Burst: 1})}, leasequota.ErrInvalidQuota, "Rate"},
		{"Inf rate", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: math.Inf(1), Burst: 1})}, leasequota.ErrInvalidQuota, "Rate"},
		{"zero rate", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0, Burst: 1})}, leasequota.ErrInvalidQuota, "Rate"},
		{"negative rate", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: -1, Burst: 1})}, leasequota.ErrInvalidQuota, "Rate"},
		{"zero burst", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 0})}, leasequota.ErrInvalidQuota, "Burst"},
		{"huge burst", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1 << 62})}, leasequota.ErrInvalidQuota, "Burst"},
		{"min above max lease", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 10, MinLease: 5, MaxLease: 4})}, leasequota.ErrInvalidQuota, "MinLease"},
		{"max lease above burst", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 10, MaxLease: 11})}, leasequota.ErrInvalidQuota, "MaxLease"},
		{"negative min lease", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 10, MinLease: -1})}, leasequota.ErrInvalidQuota, "MinLease"},
		{"negative lease TTL", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 10, LeaseTTL: -time.Second})}, leasequota.ErrInvalidQuota, "LeaseTTL"},
		{"zero refresh interval", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithRefreshInterval(0)}, leasequota.ErrInvalidOption, "WithRefreshInterval"},
		{"lease TTL below interval", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithLeaseTTL(time.Millisecond)}, leasequota.ErrInvalidOption, "WithLeaseTTL"},
		{"negative cold start wait", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithColdStartWait(-1)}, leasequota.ErrInvalidOption, "WithColdStartWait"},
		{"negative max wait", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithMaxWait(-1)}, leasequota.ErrInvalidOption, "WithMaxWait"},
		{"zero redis timeout", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithRedisTimeout(0)}, leasequota.ErrInvalidOption, "WithRedisTimeout"},
		// Durations whose sums overflowed: a call deadline past its
		// lease's life made every call's deadline negative (each call
		// failed, Degraded false); a refresh interval whose double
		// overflowed passed the lease TTL's check.
		{"longest redis timeout", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithRedisTimeout(math.MaxInt64)}, leasequota.ErrInvalidOption, "WithRedisTimeout"},
		{"longest refresh interval", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithRefreshInterval(math.MaxInt64/2 + 1)}, leasequota.ErrInvalidOption, "WithRefreshInterval"},
		{"refresh interval past half a day", []leasequota.Option{leasequota.WithDefaultQuota(good), leasequota.WithRefreshInterval(leasequota.MaxLeaseTTL/2 + 1)}, leasequota.ErrInvalidOption, "WithRefreshInterval"},
		{"nil option", []leasequota.Option{leasequota.WithDefaultQuota(good), nil}, leasequota.ErrInvalidOption, "nil Option"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := leasequota.NewWithStore(store, tc.opts...)
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

func TestAllowNInvalidN(t *testing.T) {
	store := setup(t)
	// MinLease = Burst: one lease holds the whole burst, so the count of
	// admissions below does not depend on refill timing.
	l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-6, Burst: 5, MinLease: 5}))
	ctx := context.Background()
	for _, n := range []int64{0, -1, math.MinInt64} {
		d := l.AllowN(ctx, "fresh", n)
		if d.Allowed || d.Reason != leasequota.ReasonInvalidN {
			t.Errorf("AllowN(n=%d) on a new tenant = %+v, want denial with ReasonInvalidN", n, d)
		}
	}
	if !untouched(store, "fresh") {
		t.Errorf("invalid n created the tenant's state in the store: %+v", store.Tenant("fresh"))
	}
	if !l.Allow("known") {
		t.Fatal("first request of a tenant with burst 5 denied")
	}
	for _, n := range []int64{0, -7, 6, math.MaxInt64} {
		d := l.AllowN(ctx, "known", n)
		if d.Allowed || d.Reason != leasequota.ReasonInvalidN || d.Quota.Burst != 5 {
			t.Errorf("AllowN(n=%d) = %+v, want denial with ReasonInvalidN and the quota", n, d)
		}
	}
	// The invalid requests spent nothing: 4 tokens remain of the burst.
	admitted := 0
	for i := 0; i < 10; i++ {
		if l.Allow("known") {
			admitted++
		}
	}
	if admitted != 4 {
		t.Errorf("after one admission and invalid requests, %d more admitted of burst 5, want 4", admitted)
	}
}

func TestInvalidTenantQuotaIsDenied(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		switch tenant {
		case "nan":
			return leasequota.Quota{Rate: math.NaN(), Burst: 10}
		case "zero-burst":
			return leasequota.Quota{Rate: 1}
		case "short-ttl":
			return leasequota.Quota{Rate: 1, Burst: 10, LeaseTTL: time.Nanosecond}
		}
		return leasequota.Quota{Rate: 100, Burst: 10}
	}))
	ctx := context.Background()
	for _, tenant := range []string{"nan", "zero-burst", "short-ttl"} {
		d := l.AllowN(ctx, tenant, 1)
		if d.Allowed || d.Reason != leasequota.ReasonInvalidQuota {
			t.Errorf("%s: %+v, want denial with ReasonInvalidQuota", tenant, d)
		}
		_, err := l.WaitN(ctx, tenant, 1)
		if !errors.Is(err, leasequota.ErrInvalidQuota) {
			t.Errorf("%s: WaitN error %v, want ErrInvalidQuota", tenant, err)
		}
		if !untouched(store, tenant) {
			t.Errorf("%s: invalid quota created state in the store: %+v", tenant, store.Tenant(tenant))
		}
	}
	if l.Tenants() != 0 {
		t.Errorf("tracking %d tenants with invalid quotas, want 0", l.Tenants())
	}
	if !l.Allow("good") {
		t.Error("a valid tenant was denied")
	}
}

func TestColdStartSharesOneCall(t *testing.T) {
	store := setup(t)
	// A long refresh interval keeps the syncer's loop out of the way: only
	// the cold start calls the store.
	l := newLimiter(t, store,
		leasequota.WithRefreshInterval(time.Hour), leasequota.WithLeaseTTL(2*time.Hour),
		// A cold start that waits as long as a loaded machine needs: what
		// is tested is that the callers share one call, not its speed.
		leasequota.WithColdStartWait(10*time.Second),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000, MaxLease: 500}))
	const callers = 50
	decisions := make([]leasequota.Decision, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range decisions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			decisions[i] = l.AllowN(context.Background(), "cold", 1)
		}()
	}
	close(start)
	wg.Wait()
	cold := 0
	for i, d := range decisions {
		if !d.Allowed {
			t.Errorf("caller %d denied: %+v", i, d)
		}
		if d.Reason == leasequota.ReasonColdStart {
			cold++
		}
	}
	if cold == 0 {
		t.Error("no decision says ReasonColdStart")
	}
	if st := l.Stats(); st.Calls != 1 {
		t.Errorf("%d lease calls for %d concurrent first requests, want 1", st.Calls, callers)
	}
	if d := l.AllowN(context.Background(), "cold", 1); d.Reason != leasequota.ReasonLeased || !d.Allowed {
		t.Errorf("next request = %+v, want allowed from the lease", d)
	}
}

func TestColdStartWaitBounded(t *testing.T) {
	store := faultySetup(t)
	// The miss tells the syncer before the denial returns: in process, the
	// lease it asks for may land at once, but the denial is built from
	// the tenant as it was (a cold start, nothing held).
	l := newLimiter(t, store, leasequota.WithColdStartWait(0),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}))
	d := l.AllowN(context.Background(), "t", 1)
	if d.Allowed || d.Reason != leasequota.ReasonColdStart || d.Remaining != 0 {
		t.Errorf("with no cold start wait, first request = %+v, want a cold-start denial", d)
	}
	// The miss asked the syncer for a lease: it arrives without any wait here.
	deadline := time.Now().Add(5 * time.Second)
	for !l.Allow("t") {
		if time.Now().After(deadline) {
			t.Fatal("no lease 5s after the first miss")
		}
		time.Sleep(time.Millisecond) // polling; the deadline bounds it
	}
	if made, _ := store.Calls(faultstore.OpAcquire); made == 0 {
		t.Error("admitted without a lease call")
	}
}

func TestExhaustedDenialHasRetryHint(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 5, MinLease: 5}))
	admitted := 0
	var last leasequota.Decision
	for i := 0; i < 10; i++ {
		last = l.AllowN(context.Background(), "t", 1)
		if last.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d of burst 5 at rate 1/s", admitted)
	}
	if last.Reason != leasequota.ReasonExhausted {
		t.Errorf("denial reason %v, want exhausted", last.Reason)
	}
	// Once the syncer found the bucket dry it calls again when a
	// worthwhile lease (2 tokens here) has refilled, plus its jitter (up
	// to a tenth of the refresh interval), and the hint counts that wait.
	// On the in-process store that call is often back before the last
	// request here.
	if hi := 2*time.Second + leasequota.DefaultRefreshInterval/10; last.RetryAfter <= 0 || last.RetryAfter > hi {
		t.Errorf("RetryAfter = %v, want in (0, %v] at 1 token/s", last.RetryAfter, hi)
	}
}

func TestWaitN(t *testing.T) {
	store := setup(t)
	q := leasequota.Quota{Rate: 50, Burst: 10}
	// A generous store timeout: a lease call timing out on a loaded
	// machine would hand the tenant to FailLocal, whose admissions are
	// outside the bound checked below.
	l := newLimiter(t, store, leasequota.WithDefaultQuota(q),
		leasequota.WithRedisTimeout(time.Second))
	ctx := context.Background()

	if _, err := l.WaitN(ctx, "t", 11); !errors.Is(err, leasequota.ErrExceedsBurst) {
		t.Errorf("WaitN(n > burst) = %v, want ErrExceedsBurst", err)
	}
	if _, err := l.WaitN(ctx, "t", 0); !errors.Is(err, leasequota.ErrInvalidN) {
		t.Errorf("WaitN(0) = %v, want ErrInvalidN", err)
	}

	// The store reads time.Now, as Redis reads its TIME: every refill
	// the admissions used happened within [start, end].
	start := time.Now()
	var got int64
	for got < 40 {
		d, err := l.WaitN(ctx, "t", 4)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("WaitN returned a denial without error: %+v", d)
		}
		got += 4
	}
	end := time.Now()
	// 40 tokens at 50/s with a burst of 10 need at least 0.6 s of refill.
	if el := end.Sub(start); float64(got) > float64(q.Burst)+q.Rate*el.Seconds()+1e-6 {
		t.Errorf("admitted %d tokens in %v: above burst + rate*elapsed", got, el)
	}

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	for {
		_, err := l.WaitN(short, "t", 10)
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitN past its deadline = %v, want DeadlineExceeded", err)
			}
			break
		}
	}
}

func TestCloseReturnsLeasedTokens(t *testing.T) {
	store := setup(t)
	l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
		// A rate so low that nothing refills during the test.
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-6, Burst: 100, MinLease: 40}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background()) // in case of an early failure; Close is idempotent
	d := l.AllowN(context.Background(), "t", 1)
	if !d.Allowed {
		t.Fatalf("first request denied: %+v", d)
	}
	if held := d.Remaining; held != 39 {
		t.Fatalf("holding %d tokens after the first lease of 40 and one request, want 39", held)
	}
	if g := globalTokens(t, store, "t"); math.Abs(g-60) > 0.01 {
		t.Fatalf("global bucket holds %.3f after a lease of 40, want 60", g)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g := globalTokens(t, store, "t"); math.Abs(g-99) > 0.01 {
		t.Errorf("after Close the global bucket holds %.3f, want 99 (burst 100 - 1 spent)", g)
	}
	// The return named the instance's only grant, so the store credited all of
	// it (docs/design.md, "Aged returns").
	if st := l.Stats(); st.Returned != 39 || st.Forfeited != 0 {
		t.Errorf("after Close: returned %d, forfeited %d; want 39 and 0", st.Returned, st.Forfeited)
	}
	if d := l.AllowN(context.Background(), "t", 1); d.Allowed || d.Reason != leasequota.ReasonClosed {
		t.Errorf("after Close: %+v, want denial with ReasonClosed", d)
	}
	if _, err := l.WaitN(context.Background(), "t", 1); !errors.Is(err, leasequota.ErrClosed) {
		t.Errorf("WaitN after Close = %v, want ErrClosed", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestCloseReturnsTokensAfterOthersAcquired: instance A leases from a full
// bucket, then instance B leases too; A's unspent tokens, returned on
// Close, are credited in full: the release names A's grant, so the level
// before its debit (the full bucket) does not count, only the levels
// after it (at most 60, before B's debit).
func TestCloseReturnsTokensAfterOthersAcquired(t *testing.T) {
	store := setup(t)
	q := leasequota.Quota{Rate: 1e-6, Burst: 100, MinLease: 40} // nothing refills during the test
	// A generous store timeout: a return that timed out on a loaded
	// machine would count as forfeited.
	a := newLimiter(t, store, leasequota.WithDefaultQuota(q), leasequota.WithRedisTimeout(5*time.Second))
	b := newLimiter(t, store, leasequota.WithDefaultQuota(q))
	ctx := context.Background()
	if d := a.AllowN(ctx, "t", 1); !d.Allowed || d.Remaining != 39 {
		t.Fatalf("A's first request: %+v, want admitted from a lease of 40", d)
	}
	if d := b.AllowN(ctx, "t", 1); !d.Allowed || d.Remaining != 39 {
		t.Fatalf("B's first request: %+v, want admitted from a lease of 40", d)
	}
	if g := globalTokens(t, store, "t"); math.Abs(g-20) > 0.01 {
		t.Fatalf("global bucket holds %.3f after two leases of 40, want 20", g)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Returned != 39 || st.Forfeited != 0 {
		t.Errorf("A after Close: returned %d, forfeited %d; want 39 and 0", st.Returned, st.Forfeited)
	}
	if g := globalTokens(t, store, "t"); math.Abs(g-59) > 0.01 {
		t.Errorf("after A's Close the global bucket holds %.3f, want 59 (100 - B's 40 - A's 1 spent)", g)
	}
}

// TestExpiredLeaseReturnedAfterOthersAcquired: as above, but A's lease
// comes back by expiring (A goes idle), with B's lease taken after it: the
// syncer names A's grant, so all 39 unspent tokens are credited, none
// forfeited.
func TestExpiredLeaseReturnedAfterOthersAcquired(t *testing.T) {
	store := setup(t)
	// A rate whose refill is below a level's precision: the credits are
	// whole tokens, which Stats counts exactly.
	q := leasequota.Quota{Rate: 1e-20, Burst: 100, MinLease: 40}
	// A generous store timeout: a return that timed out on a loaded
	// machine would count as forfeited.
	a := newLimiter(t, store, leasequota.WithDefaultQuota(q), leasequota.WithRedisTimeout(5*time.Second),
		leasequota.WithRefreshInterval(20*time.Millisecond), leasequota.WithLeaseTTL(100*time.Millisecond))
	b := newLimiter(t, store, leasequota.WithDefaultQuota(q),
		leasequota.WithLeaseTTL(time.Hour)) // B holds its lease throughout
	ctx := context.Background()
	if d := a.AllowN(ctx, "t", 1); !d.Allowed || d.Remaining != 39 {
		t.Fatalf("A's first request: %+v, want admitted from a lease of 40", d)
	}
	if d := b.AllowN(ctx, "t", 1); !d.Allowed || d.Remaining != 39 {
		t.Fatalf("B's first request: %+v, want admitted from a lease of 40", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().Returned+a.Stats().Forfeited < 39 {
		if time.Now().After(deadline) {
			t.Fatalf("A's lease not returned 10s after it expired (TTL 100ms): %+v", a.Stats())
		}
		time.Sleep(10 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
	// (A may hold a second batch, from an urgent refill or a renewal, and
	// return it too: it names its own grant, so it is credited in full as
	// well.)
	if st := a.Stats(); st.Returned < 39 || st.Forfeited != 0 {
		t.Errorf("A after its lease expired: returned %d, forfeited %d; want at least 39 and 0", st.Returned, st.Forfeited)
	}
}

// TestHostileTenantNames: every byte string is a tenant of its own, with
// its own bucket. How the names become Redis keys (hash tags that no name
// escapes, long names hashed) is integration's TestHostileTenantNames.
func TestHostileTenantNames(t *testing.T) {
	store := setup(t)
	// WithMaxWait: a request that finds the lease empty waits for a fresh
	// one, so each tenant's whole burst is admitted whatever the lease size.
	l := newLimiter(t, store, leasequota.WithMaxWait(200*time.Millisecond),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-6, Burst: 3}))
	huge := strings.Repeat("{}\n", 1<<20/3)
	names := []string{"", "{", "}", "{}", "a}b{c", "\n", "\x00", "\xff\xfe", huge, huge + "x"}
	ctx := context.Background()
	for _, name := range names {
		for i := 0; i < 3; i++ {
			if d := l.AllowN(ctx, name, 1); !d.Allowed {
				t.Errorf("tenant %q request %d denied: %+v", truncate(name), i, d)
			}
		}
		// Each tenant has its own bucket of 3: the fourth is denied.
		if l.Allow(name) {
			t.Errorf("tenant %q: fourth request admitted with burst 3", truncate(name))
		}
	}
	// Each name has its own bucket in the store, emptied by its three
	// admissions (nothing refills at 1e-6/s): no two names share one.
	for _, name := range names {
		if b := store.Tenant(name).Bucket; b == nil || b.Tokens > 0.01 {
			t.Errorf("tenant %q: bucket %+v, want its own, emptied by its 3 admissions", truncate(name), b)
		}
	}
}

func truncate(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}

func TestRaceSpendRefreshAndClose(t *testing.T) {
	store := setup(t)
	q := leasequota.Quota{Rate: 2000, Burst: 200}
	// FailClosed: every admission is from a lease, so the accounting below
	// is exact even when a lease call times out on a loaded machine (a
	// FailLocal admission would be outside the bound, by design).
	l, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(q), leasequota.WithLogger(testLogger(t)),
		leasequota.WithRefreshInterval(10*time.Millisecond), leasequota.WithLeaseTTL(30*time.Millisecond),
		leasequota.WithFailureMode(leasequota.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now() // the store's clock, as Redis TIME was
	var admitted [4]int64
	var sum atomic.Int64
	var wg sync.WaitGroup
	// Half a second, and on a loaded machine as long as it takes (10 s at
	// most) to admit one burst: what the machine delivers decides.
	stop, deadline := time.Now().Add(500*time.Millisecond), time.Now().Add(10*time.Second)
	for g := range admitted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for now := time.Now(); now.Before(stop) || sum.Load() < q.Burst && now.Before(deadline); now = time.Now() {
				if l.AllowN(ctx, "t", 1).Allowed {
					admitted[g]++
					sum.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	var total int64
	for _, a := range admitted {
		total += a
	}
	bound := float64(q.Burst) + q.Rate*end.Sub(start).Seconds()
	if float64(total) > bound {
		t.Errorf("admitted %d > bound %.1f", total, bound)
	}
	if total < int64(q.Burst) {
		t.Errorf("admitted only %d, less than one burst", total)
	}
	// Every leased token not spent went back: the global bucket plus what
	// was admitted cannot exceed what the bucket could have held.
	if g := globalTokens(t, store, "t"); g+float64(total) > bound+1e-6 {
		t.Errorf("global %.2f + admitted %d > bound %.1f", g, total, bound)
	}
}

// TestAllowNWithin: a denial that waiting can cure is waited for, up to
// maxWait; one it cannot (n > Burst) is not, and maxWait 0 is AllowN.
func TestAllowNWithin(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 200, Burst: 10}))
	ctx := context.Background()
	for i := range 10 {
		if d := l.AllowNWithin(ctx, "t", 1, time.Second); !d.Allowed {
			t.Fatalf("request %d of the burst denied: %+v", i, d)
		}
	}
	if d := l.AllowNWithin(ctx, "t", 5, 0); d.Allowed || !d.Reason.Waitable() {
		t.Fatalf("burst spent, maxWait 0: %+v, want a waitable denial", d)
	}
	if d := l.AllowNWithin(ctx, "t", 5, time.Second); !d.Allowed {
		t.Fatalf("burst spent, maxWait 1s at 200 tokens/s: %+v, want admitted", d)
	}
	start := time.Now()
	if d := l.AllowNWithin(ctx, "t", 11, time.Second); d.Allowed || d.Reason != leasequota.ReasonInvalidN || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("n > Burst: %+v after %v, want ReasonInvalidN at once", d, time.Since(start))
	}
}

func TestReasonWaitable(t *testing.T) {
	want := map[leasequota.Reason]bool{
		leasequota.ReasonExhausted: true, leasequota.ReasonColdStart: true, leasequota.ReasonFallback: true,
	}
	for r := leasequota.ReasonLeased; r <= leasequota.ReasonClosed; r++ {
		if got := r.Waitable(); got != want[r] {
			t.Errorf("%v.Waitable() = %v, want %v", r, got, want[r])
		}
	}
}

// TestIdleTenantEvicted: a tenant with no request for WithIdleTimeout is
// evicted (its tokens given back), and comes back as a new tenant.
func TestIdleTenantEvicted(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithIdleTimeout(300*time.Millisecond),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}))
	ctx := context.Background()
	if d := l.AllowN(ctx, "idle", 1); !d.Allowed {
		t.Fatalf("first request denied: %+v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Tenants() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("tenant still tracked 5s after its only request (idle timeout 300ms): %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
	// The admission is still counted after the eviction.
	st := l.Stats()
	if admitted := st.Admitted(); st.Evicted != 1 || admitted != 1 {
		t.Errorf("after eviction: evicted %d, admitted %d; want 1 and 1", st.Evicted, admitted)
	}
	if d := l.AllowN(ctx, "idle", 1); !d.Allowed || l.Tenants() != 1 {
		t.Errorf("request after eviction: %+v with %d tenants tracked, want admitted and 1", d, l.Tenants())
	}
	if _, err := leasequota.NewWithStore(store, leasequota.WithIdleTimeout(0)); !errors.Is(err, leasequota.ErrInvalidOption) {
		t.Errorf("WithIdleTimeout(0): %v, want ErrInvalidOption", err)
	}
}

// TestMaxTenantsWithoutBound: WithMaxTenants(math.MaxInt), a way to say
// "no bound", tracks tenants: twice the bound overflowed, and every new
// tenant was refused with ReasonTooManyTenants.
func TestMaxTenantsWithoutBound(t *testing.T) {
	l := newLimiter(t, setup(t), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}), leasequota.WithMaxTenants(math.MaxInt))
	if d := l.AllowN(context.Background(), "first", 1); !d.Allowed {
		t.Fatalf("the first request of the first tenant: %v", d.Reason)
	}
}
