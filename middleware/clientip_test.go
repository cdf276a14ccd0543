package middleware_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	cases := []struct {
		name   string
		remote string
		h      middleware.ProxyHeader
		lines  []string // values of header h
		want   string   // "" for not an IP
	}{
		{"direct", "192.0.2.1:1234", middleware.XForwardedFor, nil, "192.0.2.1"},
		{"direct v6", "[2001:db8::1]:1234", middleware.XForwardedFor, nil, "2001:db8::1"},
		{"direct v4-mapped", "[::ffff:192.0.2.1]:1234", middleware.XForwardedFor, nil, "192.0.2.1"},
		{"bare remote", "192.0.2.1", middleware.XForwardedFor, nil, "192.0.2.1"},
		{"unix socket", "@", middleware.XForwardedFor, nil, ""},
		{"untrusted remote ignores header", "192.0.2.1:1", middleware.XForwardedFor, []string{"198.51.100.1"}, "192.0.2.1"},
		{"trusted, no header", "10.0.0.1:1", middleware.XForwardedFor, nil, "10.0.0.1"},
		{"trusted, empty header", "10.0.0.1:1", middleware.XForwardedFor, []string{" , "}, "10.0.0.1"},
		{"xff one hop", "10.0.0.1:1", middleware.XForwardedFor, []string{"198.51.100.1"}, "198.51.100.1"},
		{"xff skips trusted", "10.0.0.1:1", middleware.XForwardedFor, []string{"198.51.100.1, 10.1.1.1, 10.2.2.2"}, "198.51.100.1"},
		{"xff spoofed left part", "10.0.0.1:1", middleware.XForwardedFor, []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"xff lines in order", "10.0.0.1:1", middleware.XForwardedFor, []string{"1.1.1.1", "198.51.100.1, 10.0.0.9"}, "198.51.100.1"},
		{"xff empty elements", "10.0.0.1:1", middleware.XForwardedFor, []string{"198.51.100.1,,"}, "198.51.100.1"},
		{"xff with port", "10.0.0.1:1", middleware.XForwardedFor, []string{"198.51.100.1:8080"}, "198.51.100.1"},
		{"xff v6 bracketed", "10.0.0.1:1", middleware.XForwardedFor, []string{"[2001:db8::7]:80"}, "2001:db8::7"},
		{"xff v6 trusted", "10.0.0.1:1", middleware.XForwardedFor, []string{"2001:db8::7, 2001:db8:ffff::1"}, "2001:db8::7"},
		{"xff zone dropped", "10.0.0.1:1", middleware.XForwardedFor, []string{"fe80::1%eth0"}, "fe80::1"},
		{"xff all trusted", "10.0.0.1:1", middleware.XForwardedFor, []string{"10.9.9.9, 10.8.8.8"}, "10.9.9.9"},
		{"xff malformed", "10.0.0.1:1", middleware.XForwardedFor, []string{"not-an-ip"}, "10.0.0.1"},
		{"xff malformed beyond client", "10.0.0.1:1", middleware.XForwardedFor, []string{"junk, 198.51.100.1"}, "198.51.100.1"},
		{"xff malformed port", "10.0.0.1:1", middleware.XForwardedFor, []string{"198.51.100.1:99999x"}, "10.0.0.1"},
		{"xff v6 unbracketed port", "10.0.0.1:1", middleware.XForwardedFor, []string{"[2001:db8::7"}, "10.0.0.1"},
		{"xff bracketed v4", "10.0.0.1:1", middleware.XForwardedFor, []string{"[198.51.100.1]"}, "10.0.0.1"},
		{"fwd one", "10.0.0.1:1", middleware.Forwarded, []string{"for=198.51.100.1"}, "198.51.100.1"},
		{"fwd case and params", "10.0.0.1:1", middleware.Forwarded, []string{`By=10.0.0.1;FOR="198.51.100.1:80";proto=https`}, "198.51.100.1"},
		{"fwd chain", "10.0.0.1:1", middleware.Forwarded, []string{`for=1.1.1.1, for=198.51.100.1, for="[2001:db8:ffff::2]"`}, "198.51.100.1"},
		{"fwd lines", "10.0.0.1:1", middleware.Forwarded, []string{`for=1.1.1.1`, `for=198.51.100.1;by=x`}, "198.51.100.1"},
		{"fwd quoted comma", "10.0.0.1:1", middleware.Forwarded, []string{`for=198.51.100.1;host="a,b;c=\"d\""`}, "198.51.100.1"},
		{"fwd v6", "10.0.0.1:1", middleware.Forwarded, []string{`for="[2001:db8::7]:4711"`}, "2001:db8::7"},
		{"fwd unknown", "10.0.0.1:1", middleware.Forwarded, []string{"for=unknown"}, "10.0.0.1"},
		{"fwd obfuscated", "10.0.0.1:1", middleware.Forwarded, []string{"for=_gazonk"}, "10.0.0.1"},
		{"fwd no for", "10.0.0.1:1", middleware.Forwarded, []string{"proto=https"}, "10.0.0.1"},
		{"fwd two fors", "10.0.0.1:1", middleware.Forwarded, []string{"for=198.51.100.1;for=198.51.100.2"}, "10.0.0.1"},
		{"fwd unquoted v6", "10.0.0.1:1", middleware.Forwarded, []string{"for=2001:db8::7"}, "10.0.0.1"},
		{"fwd open quote", "10.0.0.1:1", middleware.Forwarded, []string{`for="198.51.100.1`}, "10.0.0.1"},
		{"fwd no value", "10.0.0.1:1", middleware.Forwarded, []string{"for="}, "10.0.0.1"},
		{"fwd garbage", "10.0.0.1:1", middleware.Forwarded, []string{"198.51.100.1"}, "10.0.0.1"},
		{"fwd other header ignored", "10.0.0.1:1", middleware.XForwardedFor, nil, "10.0.0.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.lines {
				r.Header.Add(c.h.String(), v)
			}
			// A header the configuration does not name is never read.
			r.Header.Add("Forwarded", "for=203.0.113.66")
			if c.h == middleware.Forwarded {
				r.Header.Del("Forwarded")
				for _, v := range c.lines {
					r.Header.Add("Forwarded", v)
				}
				r.Header.Add("X-Forwarded-For", "203.0.113.66")
			}
			got, ok := middleware.ClientIP(r, c.h, proxies)
			if c.want == "" {
				if ok {
					t.Fatalf("ClientIP = %v, want not an IP", got)
				}
				return
			}
			if !ok || got.String() != c.want {
				t.Fatalf("ClientIP = %v, %v; want %s", got, ok, c.want)
			}
		})
	}
}

func TestHeaderKey(t *testing.T) {
	k := middleware.HeaderKey("x-api-key")
	r := httptest.NewRequest("GET", "/", nil)
	if got := k(r); got != "" {
		t.Fatalf("no header: %q", got)
	}
	r.Header.Set("X-Api-Key", "abc")
	if got := k(r); got != "abc" {
		t.Fatalf("got %q", got)
	}
	r.Header.Add("X-Api-Key", "second")
	if got := k(r); got != "abc" {
		t.Fatalf("two values: %q, want the first", got)
	}
	r.Header.Set("X-Api-Key", "")
	if got := k(r); got != "" {
		t.Fatalf("empty: %q", got)
	}
	r.Header.Set("X-Api-Key", string(make([]byte, middleware.MaxHeaderKeyLen+1)))
	if got := k(r); got != "" {
		t.Fatalf("too long: %q", got)
	}
}

func TestWindow(t *testing.T) {
	for _, c := range []struct {
		q    leasequota.Quota
		want int64
	}{
		{leasequota.Quota{Rate: 2, Burst: 5}, 3},
		{leasequota.Quota{Rate: 100, Burst: 100}, 1},
		{leasequota.Quota{Rate: 1000, Burst: 10}, 1},
		{leasequota.Quota{Rate: 0.5, Burst: 10}, 20},
		{leasequota.Quota{Rate: 1e-12, Burst: 1 << 40}, 999_999_999_999_999},
	} {
		if got := middleware.Window(c.q); got != c.want {
			t.Errorf("Window(%+v) = %d, want %d", c.q, got, c.want)
		}
	}
}

func TestFieldValues(t *testing.T) {
	q := leasequota.Quota{Rate: 2, Burst: 5}
	if got, want := middleware.PolicyValue(`a"b\c`, q), `"a\"b\\c";q=5;w=3`; got != want {
		t.Errorf("PolicyValue = %s, want %s", got, want)
	}
	if got, want := middleware.RateLimitValue("p", 7, 0), `"p";r=7;t=0`; got != want {
		t.Errorf("RateLimitValue = %s, want %s", got, want)
	}
	if got, want := middleware.RateLimitValue("p", -1, -1), `"p";r=0`; got != want {
		t.Errorf("RateLimitValue = %s, want %s", got, want)
	}
	for d, want := range map[time.Duration]int64{0: 1, time.Nanosecond: 1, time.Second: 1, time.Second + 1: 2, 90 * time.Second: 90} {
		if got := middleware.RetrySeconds(d); got != want {
			t.Errorf("RetrySeconds(%v) = %d, want %d", d, got, want)
		}
	}
	// Round trip through a structured-field parser.
	rec := httptest.NewRecorder()
	rec.Header().Set("RateLimit-Policy", middleware.PolicyValue(`a"b\c`, q))
	rec.Header().Set("RateLimit", middleware.RateLimitValue(`a"b\c`, 4, 2))
	if p := parsePolicy(t, rec.Header()); p != (policy{`a"b\c`, 5, 3}) {
		t.Errorf("parsed policy %+v", p)
	}
	if rl := parseRateLimit(t, rec.Header()); rl != (rateLimit{`a"b\c`, 4, 2, true}) {
		t.Errorf("parsed RateLimit %+v", rl)
	}
}
