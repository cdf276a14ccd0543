package middleware

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzIPv4Host holds ipv4Host, ipKey's fast path, to the general path it
// skips: it accepts s exactly when s is "host:port" (one colon) with a
// host that netip.ParseAddr parses as IPv4, and then returns that host,
// which is what remoteHost returns, and its address.
func FuzzIPv4Host(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:1234", "0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:", "1.2.3.4",
		"01.2.3.4:1", "1.2.3.04:1", "1.2.3.00:1", "256.1.1.1:1", "1.2.3.4.5:1", "1.2.3:1", "1..2.3:1",
		".1.2.3:1", "1.2.3.:1", "1.2.3.4:1:2", "[::1]:80", "::ffff:1.2.3.4", "a.b.c.d:1", "1.2.3.4%x:1",
		"1.2.3.1000:1", "99999999999999999999.1.1.1:1", "", ":", "1.2.3.4::",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, a, ok := ipv4Host(s)
		want, wantOK := "", false
		if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
			if addr, err := netip.ParseAddr(s[:i]); err == nil && addr.Is4() {
				want, wantOK = s[:i], true
			}
		}
		if ok != wantOK || host != want {
			t.Fatalf("ipv4Host(%q) = %q, %v; want %q, %v", s, host, ok, want, wantOK)
		}
		if !ok {
			return
		}
		if rh := remoteHost(s); rh != host {
			t.Fatalf("ipv4Host(%q) = %q, remoteHost %q", s, host, rh)
		}
		if addr := netip.MustParseAddr(host); addr.As4() != a {
			t.Fatalf("ipv4Host(%q) address %v, want %v", s, a, addr.As4())
		}
	})
}
