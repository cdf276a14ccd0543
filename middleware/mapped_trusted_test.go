package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestTrustedProxiesMappedPrefix trusts proxies named by a prefix in
// IPv4-mapped IPv6 form as their IPv4 prefix: client addresses are
// compared unmapped, so ::ffff:10.0.0.0/104 must mean 10.0.0.0/8, both
// for RemoteAddr and for the proxies walked in the header.
func TestTrustedProxiesMappedPrefix(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 10}))
	for _, tc := range []struct{ prefix, remote, xff, want string }{
		{"::ffff:10.0.0.0/104", "10.1.2.3:5555", "192.0.2.7, 10.9.9.9", "192.0.2.7"},
		{"::ffff:10.0.0.0/104", "[::ffff:10.1.2.3]:5555", "192.0.2.8", "192.0.2.8"},
		{"::ffff:10.0.0.0/104", "11.1.2.3:5555", "192.0.2.9", "11.1.2.3"},
		{"::ffff:0.0.0.0/96", "203.0.113.1:5555", "192.0.2.10, 198.51.100.1", "192.0.2.10"},
	} {
		var hook hookLog
		h := middleware.New(l, hook.option(),
			middleware.WithTrustedProxies(middleware.XForwardedFor, netip.MustParsePrefix(tc.prefix)))(okHandler)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = tc.remote
		req.Header.Set("X-Forwarded-For", tc.xff)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if got := hook.last(t).key; got != tc.want {
			t.Errorf("trusted %s, RemoteAddr %s, X-Forwarded-For %q: key %q, want %q",
				tc.prefix, tc.remote, tc.xff, got, tc.want)
		}
	}
}
