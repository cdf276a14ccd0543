package middleware

import (
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// ProxyHeader names the request header that trusted reverse proxies write
// the client's address into.
type ProxyHeader uint8

const (
	// Forwarded is the RFC 7239 Forwarded header: the "for" parameter of
	// each element.
	Forwarded ProxyHeader = iota + 1
	// XForwardedFor is the de facto X-Forwarded-For header: a comma
	// separated list of addresses.
	XForwardedFor
)

// String returns the header's name.
func (h ProxyHeader) String() string {
	switch h {
	case Forwarded:
		return "Forwarded"
	case XForwardedFor:
		return "X-Forwarded-For"
	}
	return "ProxyHeader(?)"
}

// ClientIP returns the address of the client that sent r, and false when
// r.RemoteAddr is not an IP address (a Unix socket, say).
//
// When RemoteAddr is not in one of the trusted prefixes (or none are
// given), the headers are ignored and RemoteAddr is the client. Otherwise
// the addresses in header h (all its lines, in order) are walked right to
// left, skipping those in a trusted prefix: the first untrusted one is the
// client. When every listed address is trusted, the leftmost is the
// client. When the header is missing or empty, or an entry the walk
// reaches is not an IP address (malformed, "unknown", an obfuscated
// identifier, an element without "for"), the walk gives up and RemoteAddr
// is the client.
//
// Addresses may carry a port ("192.0.2.1:80", "[2001:db8::1]:80");
// IPv4-mapped IPv6 addresses are returned as IPv4, without zone, and are
// compared with trusted in that form: a trusted prefix in IPv4-mapped form
// (::ffff:10.0.0.0/104) matches none of them; give it as IPv4
// (10.0.0.0/8), as WithTrustedProxies does.
func ClientIP(r *http.Request, h ProxyHeader, trusted []netip.Prefix) (netip.Addr, bool) {
	remote, ok := parseRemote(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !contains(trusted, remote) {
		return remote, true
	}
	if a, ok := fromHeader(r.Header, h, trusted); ok {
		return a, true
	}
	return remote, true
}

// parseRemote parses a RemoteAddr: "ip:port", "[ipv6]:port" or a bare IP.
func parseRemote(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(remoteHost(s))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// remoteHost returns the host part of a RemoteAddr without allocating.
func remoteHost(s string) string {
	// Fast path, "digits-and-dots:port" (IPv4): what SplitHostPort
	// returns for it, without its general parsing.
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ':' {
			if i > 0 && strings.IndexByte(s[i+1:], ':') < 0 {
				return s[:i]
			}
			break
		}
		if (c < '0' || c > '9') && c != '.' {
			break
		}
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// ipv4Host returns the host of s when s is "a.b.c.d:port" with the
// address in the canonical form netip.ParseAddr accepts for IPv4 (four
// decimal fields of 0 to 255, without leading zeros) and no other colon,
// and the address's bytes; ok is false for any other s. It is the common
// RemoteAddr, parsed in one pass: ipKey's fast path. What it accepts,
// remoteHost and netip.ParseAddr accept alike (FuzzIPv4Host).
func ipv4Host(s string) (host string, a [4]byte, ok bool) {
	// Field by field, each's one to three digits written out, then its
	// separator: about a third fewer instructions than one loop over the
	// bytes that asks of each whether it ends a field (callgrind, on the
	// benchmarks' "192.0.2.1:1234").
	i := 0
	var sep byte = '.'
	for f := range 4 {
		if f == 3 {
			sep = ':'
		}
		if i >= len(s) {
			return "", a, false
		}
		n := uint(s[i] - '0')
		if n > 9 {
			return "", a, false
		}
		i++
		if i < len(s) {
			if d := uint(s[i] - '0'); d <= 9 {
				if n == 0 { // a leading zero
					return "", a, false
				}
				n = n*10 + d
				i++
				if i < len(s) {
					if d := uint(s[i] - '0'); d <= 9 {
						if n = n*10 + d; n > 255 {
							return "", a, false
						}
						i++
					}
				}
			}
		}
		if i >= len(s) || s[i] != sep { // also a fourth digit
			return "", a, false
		}
		a[f] = byte(n)
		i++
	}
	for j := i; j < len(s); j++ { // the port: no other colon
		if s[j] == ':' {
			return "", a, false
		}
	}
	return s[:i-1], a, true
}

func contains(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromHeader walks header h right to left; ok is false when the walk gives
// up (no entries, or a malformed one).
func fromHeader(hdr http.Header, h ProxyHeader, trusted []netip.Prefix) (netip.Addr, bool) {
	switch h {
	case XForwardedFor:
		return walk(hdr.Values("X-Forwarded-For"), splitXFF, trusted)
	case Forwarded:
		return walk(hdr.Values("Forwarded"), splitForwarded, trusted)
	}
	return netip.Addr{}, false
}

// walk applies the right-to-left rule to the entries of lines, which split
// turns into node strings ("" for an entry without an address).
func walk(lines []string, split func(string) ([]string, bool), trusted []netip.Prefix) (netip.Addr, bool) {
	var last netip.Addr
	seen := false
	for i := len(lines) - 1; i >= 0; i-- {
		nodes, ok := split(lines[i])
		if !ok {
			return netip.Addr{}, false
		}
		for j := len(nodes) - 1; j >= 0; j-- {
			a, ok := parseNode(nodes[j])
			if !ok {
				return netip.Addr{}, false
			}
			if !contains(trusted, a) {
				return a, true
			}
			last, seen = a, true
		}
	}
	return last, seen
}

// splitXFF splits an X-Forwarded-For line at commas, dropping empty
// elements (RFC 9110, section 5.6.1).
func splitXFF(line string) ([]string, bool) {
	var nodes []string
	for e := range strings.SplitSeq(line, ",") {
		if e = strings.TrimSpace(e); e != "" {
			nodes = append(nodes, e)
		}
	}
	return nodes, true
}

// splitForwarded parses a Forwarded line (RFC 7239, section 4) and returns
// the "for" value of each element, "" for an element without one, with
// two, or that does not parse. Proxies append their elements to the line
// they received, so an element that does not parse does not spoil those
// after it: the parse goes on after the next comma. (A quoted string
// opened by a bad element cannot swallow a well-formed element appended
// after it: ending at that element's opening quote, it is not followed by
// ';' or ','.) ok is always true.
func splitForwarded(line string) ([]string, bool) {
	var nodes []string
	s := line
	for {
		s = trimOWS(s)
		if s == "" {
			return nodes, true
		}
		if s[0] == ',' { // empty element
			s = s[1:]
			continue
		}
		value, rest, ok := forwardedElement(s)
		if !ok {
			value, rest = "", ""
			if i := strings.IndexByte(s, ','); i >= 0 {
				rest = s[i:]
			}
		}
		nodes = append(nodes, value)
		s = rest
		if s != "" {
			s = s[1:] // the comma
		}
	}
}

// forwardedElement parses the Forwarded element at the start of s and
// returns its "for" value ("" without one, or with two) and the rest of
// s, "" or starting with the comma that ends the element. ok is false
// when the element does not parse.
func forwardedElement(s string) (forValue, rest string, ok bool) {
	haveFor, twice := false, false
	for { // pairs of one element
		s = trimOWS(s)
		i := 0
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		if i == 0 || i == len(s) || s[i] != '=' {
			return "", "", false
		}
		name := s[:i]
		s = s[i+1:]
		var value string
		if s != "" && s[0] == '"' {
			v, rest, ok := unquote(s)
			if !ok {
				return "", "", false
			}
			value, s = v, rest
		} else {
			j := 0
			for j < len(s) && isTokenChar(s[j]) {
				j++
			}
			if j == 0 {
				return "", "", false
			}
			value, s = s[:j], s[j:]
		}
		if strings.EqualFold(name, "for") {
			twice = haveFor
			forValue, haveFor = value, true
		}
		s = trimOWS(s)
		if s == "" || s[0] == ',' {
			break
		}
		if s[0] != ';' {
			return "", "", false
		}
		s = s[1:]
	}
	if twice {
		forValue = ""
	}
	return forValue, s, true
}

// unquote reads an RFC 9110 quoted-string at the start of s.
func unquote(s string) (value, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			i++
			if i == len(s) {
				return "", "", false
			}
			b.WriteByte(s[i])
		default:
			if c < 0x20 && c != '\t' || c == 0x7f {
				return "", "", false
			}
			b.WriteByte(c)
		}
	}
	return "", "", false
}

func trimOWS(s string) string { return strings.TrimLeft(s, " \t") }

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseNode parses one hop: "192.0.2.1", "192.0.2.1:80", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:80". Anything else is not an address.
func parseNode(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && !validPort(rest) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return a.Unmap().WithZone(""), true
	}
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.Count(s, ":") == 1 {
		// IPv4 with a port.
		if !validPort(s[i:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// validPort reports whether s is ":" followed by 1 to 5 digits.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// MaxHeaderKeyLen is the longest header value HeaderKey uses as a key.
const MaxHeaderKeyLen = 256

// A KeyFunc returns the key a request is limited by, its tenant: the
// string the Limiter limits, leasequota.WithQuotaFunc receives and
// SetQuota and GetQuota take. An empty key means the request has none:
// see WithKeyFunc for what it gets.
type KeyFunc func(r *http.Request) string

// HeaderKey returns a KeyFunc that keys requests by the value of header
// name (an API key, say), as it is: the request "X-Tenant: acme" counts
// against tenant "acme", the string to give leasequota.WithQuotaFunc,
// SetQuota and GetQuota. Only the first value of the header counts.
// Requests without the header, or whose value is empty or longer than
// MaxHeaderKeyLen bytes, get an empty key: they have none (see
// WithKeyFunc). To keep the keys of several headers or services apart in
// one Limiter, prefix them in a KeyFunc of your own, or give each its own
// leasequota.WithKeyPrefix.
func HeaderKey(name string) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) string {
		v := r.Header[name]
		if len(v) == 0 || len(v[0]) > MaxHeaderKeyLen {
			return ""
		}
		return v[0]
	}
}
