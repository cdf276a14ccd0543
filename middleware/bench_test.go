package middleware_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/middleware"
)

// The overhead of the middleware per request: compare BenchmarkMiddleware
// with BenchmarkBareHandler. The key holds a large lease, so every request
// is decided locally; the request is built once and the recorder reused,
// its header map cleared between requests.
//
// The handler sets Content-Type, as almost every real handler does, so
// that the header map holds a field in the bare runs too: clearing a map
// that holds fields (zeroing its slots) costs the same for one field or
// three, and a clear of an empty map is free, so with a handler that set
// no field the recorder's reset would be counted as the middleware's.
// (A server makes a fresh header map per request instead; its storage is
// allocated by the first field set, the handler's.) The value slice is
// shared so that the handler itself allocates nothing: allocs/op is the
// middleware's.

var textPlain = []string{"text/plain; charset=utf-8"}

var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = textPlain
})

func benchServe(b *testing.B, h http.Handler) {
	req := httptest.NewRequest(http.MethodGet, "/", nil) // RemoteAddr 192.0.2.1:1234
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req) // the key's first lease
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(rec.Header())
		h.ServeHTTP(rec, req)
	}
	b.StopTimer()
	if rec.Code != http.StatusOK {
		b.Fatalf("status %d", rec.Code)
	}
}

func benchLimiter(b *testing.B) *leasequota.Limiter {
	return newLimiter(b, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e9, Burst: 1 << 40}))
}

func BenchmarkBareHandler(b *testing.B) {
	benchServe(b, bareHandler)
}

func BenchmarkMiddleware(b *testing.B) {
	benchServe(b, middleware.New(benchLimiter(b))(bareHandler))
}

func BenchmarkMiddlewareLegacyHeaders(b *testing.B) {
	benchServe(b, middleware.New(benchLimiter(b), middleware.WithLegacyHeaders())(bareHandler))
}

func BenchmarkMiddlewareAPIKey(b *testing.B) {
	h := middleware.New(benchLimiter(b), middleware.WithHeaderKey("X-Api-Key"))(bareHandler)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Api-Key", "k-123")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(rec.Header())
		h.ServeHTTP(rec, req)
	}
}

func BenchmarkMiddlewareParallel(b *testing.B) {
	h := middleware.New(benchLimiter(b))(bareHandler)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		rec := httptest.NewRecorder()
		for pb.Next() {
			clear(rec.Header())
			h.ServeHTTP(rec, req)
		}
	})
}

// BenchmarkOverhead runs the bare handler and the middleware side by side
// (one benchmark, so that a noisy machine affects both alike): the
// difference of bare and one-policy is the middleware's overhead;
// two-policies is a client IP and a header policy decided by one
// AllowAll.
func BenchmarkOverhead(b *testing.B) {
	benchOverhead(b, benchLimiter)
}

// benchOverhead runs BenchmarkOverhead's three cases on the limiter that
// limiter returns.
func benchOverhead(b *testing.B, limiter func(b *testing.B) *leasequota.Limiter) {
	b.Run("bare", func(b *testing.B) { benchServe(b, bareHandler) })
	b.Run("one-policy", func(b *testing.B) { benchServe(b, middleware.New(limiter(b))(bareHandler)) })
	b.Run("two-policies", func(b *testing.B) {
		h := middleware.New(limiter(b), middleware.WithClientIPPolicy("ip", "ip:"),
			middleware.WithPolicy("tenant", middleware.HeaderKey("X-Tenant")))(bareHandler)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Tenant", "t-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			clear(rec.Header())
			h.ServeHTTP(rec, req)
		}
		b.StopTimer()
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	})
}

// BenchmarkInProcessOverhead is BenchmarkOverhead with the Limiter's
// buckets in process (lease/memstore) instead of on Redis: the same
// request path, without Redis and its lease calls on the machine's cores.
// It is for counting instructions, which a shared machine does not
// disturb, under valgrind (GODEBUG=asyncpreemptoff=1 valgrind
// --tool=callgrind ./middleware.test -test.run '^$' -test.bench
// 'InProcessOverhead/one-policy$' -test.benchtime 50001x -test.cpu 1, less
// the same with 1x, over 50,000), where a limiter on Redis misses its lease
// calls' deadlines and decides by its failure mode instead.
func BenchmarkInProcessOverhead(b *testing.B) {
	benchOverhead(b, func(b *testing.B) *leasequota.Limiter {
		l, err := leasequota.NewWithStore(memstore.New(), leasequota.WithLogger(slog.New(slog.DiscardHandler)),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e9, Burst: 1 << 40}))
		if err != nil {
			b.Fatal(err)
		}
		closeAtEnd(b, l)
		return l
	})
}
