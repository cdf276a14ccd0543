package middleware_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/leasequota/leasequota/middleware"
)

// TestForwardedAppendedToABadElement: a proxy that appends its element to
// the Forwarded line it received ("$http_forwarded, for=$remote_addr", as
// nginx's recipe does for a line that is syntactically valid) names the
// client in the rightmost element, which the walk reaches first. The
// client's own elements, to its left, are not reached, so whatever they
// hold must not matter (ClientIP: the walk gives up on an entry it
// reaches that is not an IP address). A line that did not parse as a
// whole (two "for" in the client's element, an open quote, garbage) gave
// up on all of it, and every client could choose to be keyed by the
// proxy's address instead of its own.
func TestForwardedAppendedToABadElement(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, c := range []struct{ line, want string }{
		{"for=198.51.100.1;for=198.51.100.2, for=203.0.113.5", "203.0.113.5"},
		{"for=198.51.100.1;for=198.51.100.2, for=203.0.113.5, for=10.0.0.9", "203.0.113.5"},
		{"garbage, for=203.0.113.5", "203.0.113.5"},
		{`for="198.51.100.1, for=203.0.113.5`, "203.0.113.5"},
		{`for=", for="[2001:db8::7]:4711"`, "2001:db8::7"},
		{`for="\, for="[2001:db8::7]"`, "2001:db8::7"},
		{`host="a,for=198.51.100.1";x y, for=203.0.113.5`, "203.0.113.5"},
		{"for=198.51.100.1;;, for=203.0.113.5", "203.0.113.5"},
		// Reached by the walk, a bad element still gives up: RemoteAddr.
		{"for=203.0.113.5, for=198.51.100.1;for=198.51.100.2", "10.0.0.1"},
		{"for=203.0.113.5, garbage", "10.0.0.1"},
		{`for=203.0.113.5, for="198.51.100.1`, "10.0.0.1"},
		{"for=203.0.113.5, for=10.0.0.9;for=10.0.0.8", "10.0.0.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:1234"
		r.Header.Set("Forwarded", c.line)
		got, ok := middleware.ClientIP(r, middleware.Forwarded, proxies)
		if !ok || got.String() != c.want {
			t.Errorf("Forwarded: %s\nClientIP = %v, %v; want %s", c.line, got, ok, c.want)
		}
	}
}
