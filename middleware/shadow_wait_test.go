package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/middleware"
)

// TestShadowWaitsOnlyTheLimitersOwnWaits: shadow mode never holds a
// request for the middleware's WithMaxWait, but the Limiter's own waits
// come first, as for AllowN: a key's first request waits for its first
// lease, up to WithColdStartWait. The docs said a shadow request is never
// delayed; on a store whose calls take 500 ms, a key's first request took
// the whole cold-start wait (100 ms; 100.6 ms measured on real time
// before this test pinned it). In a synctest bubble, so that the waits
// are exact.
func TestShadowWaitsOnlyTheLimitersOwnWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := faultstore.New(memstore.New())
		fs.SetHook(faultstore.Delay(500 * time.Millisecond))
		l, err := leasequota.NewWithStore(fs, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}),
			leasequota.WithRedisTimeout(time.Second), leasequota.WithColdStartWait(100*time.Millisecond),
			leasequota.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		var last leasequota.Decision
		h := middleware.New(l, middleware.WithShadow(), middleware.WithHeaderKey("X-Tenant"),
			middleware.WithMaxWait(10*time.Second),
			middleware.WithDecisionHook(func(_ *http.Request, _ string, d leasequota.Decision) { last = d }))(okHandler)
		send := func() (int, time.Duration) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Tenant", "acme")
			w := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(w, r)
			return w.Code, time.Since(start)
		}

		// The first request waits for the key's first lease, up to the
		// Limiter's cold-start wait; the store answers after 500 ms, so it
		// is denied cold_start, and passed on.
		code, took := send()
		if code != http.StatusOK || last.Reason != leasequota.ReasonColdStart || took != 100*time.Millisecond {
			t.Errorf("first request: %d after %v (%v), want 200 after the cold-start wait of 100ms (cold_start)", code, took, last.Reason)
		}

		// Once the lease has landed, the key's token is spent, and a
		// request it cannot cover (RetryAfter about a second, within the
		// middleware's WithMaxWait of 10 s) is not held for it.
		time.Sleep(time.Second)
		synctest.Wait()
		if code, took := send(); code != http.StatusOK || !last.Allowed || took != 0 {
			t.Errorf("second request: %d after %v (%+v), want 200 admitted at once", code, took, last)
		}
		code, took = send()
		if code != http.StatusOK || last.Allowed || last.RetryAfter <= 0 || last.RetryAfter > 10*time.Second || took != 0 {
			t.Errorf("third request: %d after %v (%+v), want 200 passed on at once, denied with a RetryAfter within the max wait", code, took, last)
		}
	})
}
