package middleware_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestClientIPPolicyNestedPrefixes checks that New refuses two
// WithClientIPPolicy prefixes of which one starts with the other: "ip"
// and "ip2" key client 21:db8::1 under the first and client 1:db8::1
// under the second both "ip21:db8::1", one bucket for two clients. Were
// New to accept them, the test shows the shared bucket: a client that
// never sent a request is refused by what another client spent.
func TestClientIPPolicyNestedPrefixes(t *testing.T) {
	leakCheck(t)
	q := leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.001, Burst: 1, MaxLease: 1})
	for _, order := range [][2]string{{"ip", "ip2"}, {"ip2", "ip"}} {
		l := newLimiter(t, q) // a bucket of its own for each order
		opts := []middleware.Option{middleware.WithClientIPPolicy("a", order[0]), middleware.WithClientIPPolicy("b", order[1])}
		h, err := newHandler(l, opts...)
		if err == nil {
			t.Errorf("prefixes %q: New accepted them; %s", order, sharedBucket(h, order))
			continue
		}
		if !errors.Is(err, middleware.ErrInvalidOption) {
			t.Errorf("prefixes %q: New panicked with %v, want an error wrapping ErrInvalidOption", order, err)
		}
	}
	// Prefixes that share a start but where neither starts with the
	// other remain valid.
	if _, err := newHandler(newLimiter(t, q), middleware.WithClientIPPolicy("a", "ip4:"), middleware.WithClientIPPolicy("b", "ip6:")); err != nil {
		t.Errorf("prefixes ip4: and ip6: refused: %v", err)
	}
}

// newHandler returns the middleware New builds over okHandler, or the
// error it panicked with.
func newHandler(l *leasequota.Limiter, opts ...middleware.Option) (h http.Handler, err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
			if err == nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}
	}()
	return middleware.New(l, opts...)(okHandler), nil
}

// sharedBucket sends one request from a client of the shorter prefix's
// collision, then one from the other client, and says what they got.
func sharedBucket(h http.Handler, order [2]string) string {
	send := func(ip string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "[" + ip + "]:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	first := send("21:db8::1") // "ip"+"21:db8::1"
	second := send("1:db8::1") // "ip2"+"1:db8::1", the same key
	return fmt.Sprintf("client 21:db8::1 got %d, then client 1:db8::1, on its first request, got %d (a bucket of 1 each)", first, second)
}
