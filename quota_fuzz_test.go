package leasequota_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// documentedValid is Quota.Validate's contract, written out from the
// field docs: Rate finite in (0, 1e12]; Burst 1..2^40; MinLease, MaxLease
// >= 0 (0 means default) and <= Burst; MinLease <= MaxLease unless
// MaxLease is 0; 0 <= LeaseTTL <= MaxLeaseTTL; FailureMode one of the four
// constants.
func documentedValid(q leasequota.Quota) bool {
	switch {
	case math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0) || q.Rate <= 0 || q.Rate > 1e12:
		return false
	case q.Burst < 1 || q.Burst > 1<<40:
		return false
	case q.MinLease < 0 || q.MaxLease < 0 || q.MinLease > q.Burst || q.MaxLease > q.Burst:
		return false
	case q.MaxLease != 0 && q.MinLease > q.MaxLease:
		return false
	case q.LeaseTTL < 0 || q.LeaseTTL > leasequota.MaxLeaseTTL:
		return false
	case q.FailureMode > leasequota.FailOpen:
		return false
	}
	return true
}

// quietLogger drops the limiter's logs (thousands of fuzzed limiters).
var quietLogger = slog.New(slog.DiscardHandler)

// FuzzQuotaValidate checks Quota.Validate against its documented rules,
// and that every quota it accepts is usable: New takes it as the default
// quota, a first request is decided by it (not refused as invalid), with
// every lease field resolved to a sane value, and the limiter's syncer
// plans it and leases from the in-process store without panicking. A
// rejected quota must be rejected by New too, with ErrInvalidQuota.
//
// The seed corpus is testdata/fuzz/FuzzQuotaValidate plus the f.Add calls.
func FuzzQuotaValidate(f *testing.F) {
	f.Add(100.0, int64(10), int64(0), int64(0), int64(0), uint8(0))
	f.Add(1e12, int64(1<<40), int64(1<<40), int64(1<<40), int64(leasequota.MaxLeaseTTL), uint8(3))
	f.Add(1e12, int64(1<<40), int64(1<<40), int64(1<<40), int64(math.MaxInt64), uint8(3))
	f.Add(5e-324, int64(1), int64(1), int64(1), int64(1), uint8(1))
	f.Add(math.NaN(), int64(10), int64(0), int64(0), int64(0), uint8(0))
	f.Add(math.Inf(1), int64(10), int64(0), int64(0), int64(0), uint8(0))
	f.Add(-1.0, int64(-1), int64(-1), int64(-1), int64(-1), uint8(4))
	f.Add(1.0, int64(10), int64(5), int64(4), int64(0), uint8(2))
	f.Add(1e12+1, int64(1<<40+1), int64(0), int64(0), int64(0), uint8(255))

	f.Fuzz(func(t *testing.T, rate float64, burst, minLease, maxLease, ttl int64, mode uint8) {
		store := memstore.New() // each input on empty buckets
		q := leasequota.Quota{
			Rate: rate, Burst: burst, MinLease: minLease, MaxLease: maxLease,
			LeaseTTL: time.Duration(ttl), FailureMode: leasequota.FailureMode(mode),
		}
		err := q.Validate()
		if want := documentedValid(q); (err == nil) != want {
			t.Fatalf("%+v: Validate() = %v, the documented rules say valid=%v", q, err, want)
		}
		if err != nil {
			if !errors.Is(err, leasequota.ErrInvalidQuota) {
				t.Fatalf("%+v: Validate() = %v, want an error wrapping ErrInvalidQuota", q, err)
			}
			if _, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(q)); !errors.Is(err, leasequota.ErrInvalidQuota) {
				t.Fatalf("%+v: New(WithDefaultQuota) = %v, want ErrInvalidQuota", q, err)
			}
			return
		}

		// Validate cannot know the refresh interval: New adds the rule
		// that a LeaseTTL that is set is at least twice the interval, the
		// same for the default quota and for WithQuotaFunc's.
		if q.LeaseTTL != 0 && q.LeaseTTL < 2*leasequota.DefaultRefreshInterval {
			if _, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(q)); !errors.Is(err, leasequota.ErrInvalidQuota) {
				t.Fatalf("%+v: New(WithDefaultQuota) = %v, want ErrInvalidQuota (LeaseTTL below twice the refresh interval)", q, err)
			}
			return
		}
		l, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(q), leasequota.WithColdStartWait(0),
			leasequota.WithLogger(quietLogger))
		if err != nil {
			t.Fatalf("%+v: Validate() = nil but New(WithDefaultQuota) = %v", q, err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			l.Close(ctx) // returns what was leased, in process
		}()
		d := l.AllowN(context.Background(), "tenant", 1)
		if d.Reason == leasequota.ReasonInvalidQuota || d.Reason == leasequota.ReasonInvalidN {
			t.Fatalf("%+v: first request %+v: a valid quota must be usable", q, d)
		}
		r := d.Quota
		switch {
		case r.Rate != q.Rate || r.Burst != q.Burst:
			t.Fatalf("%+v: decision quota %+v changed Rate or Burst", q, r)
		case r.MinLease < 1 || r.MinLease > r.MaxLease || r.MaxLease > r.Burst:
			t.Fatalf("%+v: resolved leases %+v, want 1 <= MinLease <= MaxLease <= Burst", q, r)
		case q.MinLease != 0 && r.MinLease != q.MinLease, q.MaxLease != 0 && r.MaxLease != q.MaxLease:
			t.Fatalf("%+v: resolved %+v changed a lease field that was set", q, r)
		case r.LeaseTTL <= 0 || (q.LeaseTTL != 0 && r.LeaseTTL != q.LeaseTTL):
			t.Fatalf("%+v: resolved LeaseTTL %v", q, r.LeaseTTL)
		case r.FailureMode == leasequota.FailDefault || r.FailureMode > leasequota.FailOpen ||
			(q.FailureMode != leasequota.FailDefault && r.FailureMode != q.FailureMode):
			t.Fatalf("%+v: resolved FailureMode %v", q, r.FailureMode)
		}
	})
}

// TestLeaseTTLRuleSameEverywhere: Quota.Validate cannot check a LeaseTTL
// against the refresh interval, so New does; a quota given through
// WithDefaultQuota and the same quota from WithQuotaFunc must meet the
// same fate. A LeaseTTL of 50ms (default interval 100ms) passes Validate,
// and must be refused by both (New's error, ReasonInvalidQuota) or
// accepted by both.
func TestLeaseTTLRuleSameEverywhere(t *testing.T) {
	store := memstore.New()
	q := leasequota.Quota{Rate: 100, Burst: 10, LeaseTTL: 50 * time.Millisecond}
	if err := q.Validate(); err != nil {
		t.Skipf("Validate now rejects %+v (%v)", q, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	lDefault, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(q), leasequota.WithColdStartWait(0),
		leasequota.WithLogger(quietLogger))
	var dDefault leasequota.Decision
	if err == nil {
		dDefault = lDefault.AllowN(ctx, "tenant", 1)
		lDefault.Close(ctx)
	}
	lFunc, err2 := leasequota.NewWithStore(store, leasequota.WithQuotaFunc(func(string) leasequota.Quota { return q }),
		leasequota.WithColdStartWait(0), leasequota.WithLogger(quietLogger))
	if err2 != nil {
		t.Fatal(err2)
	}
	dFunc := lFunc.AllowN(ctx, "tenant", 1)
	lFunc.Close(ctx)

	if (err == nil) != (dFunc.Reason != leasequota.ReasonInvalidQuota) {
		t.Errorf("quota %+v: Validate() = nil; New(WithDefaultQuota) = %v (first request: reason %s); "+
			"WithQuotaFunc: first request reason %s: the two ways to give a quota disagree",
			q, err, dDefault.Reason, dFunc.Reason)
	}
	if err != nil && !errors.Is(err, leasequota.ErrInvalidQuota) {
		t.Errorf("New(WithDefaultQuota(%+v)) = %v, want ErrInvalidQuota", q, err)
	}
}

// TestHugeLeaseTTLKeepsLeases: Quota.Validate once accepted any LeaseTTL up to
// math.MaxInt64 (292 years), but a lease's expiry is kept as the Unix
// time in nanoseconds of grant + LeaseTTL, which overflows int64 past the
// year 2262: with LeaseTTL 250 years every lease "expires" at the next
// plan and is dropped unspent, so the tenant keeps leasing and losing
// tokens. A valid quota must not do that: it must hold its lease as one of
// 1 hour does (Stats().Expired stays 0). Validate now refuses a LeaseTTL
// above MaxLeaseTTL (24h), which this test accepts as an answer.
func TestHugeLeaseTTLKeepsLeases(t *testing.T) {
	store := setup(t)
	for _, ttl := range []time.Duration{time.Hour, 250 * 365 * 24 * time.Hour} {
		q := leasequota.Quota{Rate: 100, Burst: 100, LeaseTTL: ttl}
		if err := q.Validate(); err != nil {
			t.Logf("LeaseTTL %v: Validate() = %v: refused, fine", ttl, err)
			continue
		}
		l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
			leasequota.WithColdStartWait(10*time.Second), // a loaded machine's first lease may take long
			leasequota.WithQuotaFunc(func(string) leasequota.Quota { return q }))
		if err != nil {
			t.Logf("LeaseTTL %v: New = %v: refused, fine", ttl, err)
			continue
		}
		if d := l.AllowN(context.Background(), "tenant", 1); !d.Allowed {
			t.Fatalf("LeaseTTL %v: first request %+v", ttl, d)
		}
		// Five refresh intervals: time for the syncer to plan the tenant
		// a few times. Expired must stay 0 throughout.
		for start := time.Now(); time.Since(start) < 500*time.Millisecond; {
			if st := l.Stats(); st.Expired != 0 {
				t.Errorf("LeaseTTL %v (%.0f years): %d leased tokens expired %v after the first lease; stats %+v",
					ttl, ttl.Hours()/24/365, st.Expired, time.Since(start).Round(time.Millisecond), st)
				break
			}
			time.Sleep(10 * time.Millisecond) // sampling for a bounded half second
		}
		l.Close(context.Background())
	}
}
