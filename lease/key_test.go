package lease

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/internal/keyslot"
)

// hashTag returns the content of key's hash tag as Redis Cluster finds it,
// and whether there is one.
func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 {
		return "", false
	}
	return key[open+1 : open+1+n], true
}

// checkKey asserts the structural promises of Key for a prefix without
// braces: the key is prefix + "{" + tag + "}", the tag is non-empty and has
// no braces, and the slot is the tag's slot.
func checkKey(t testing.TB, prefix, tenant string) string {
	t.Helper()
	k := Key(prefix, tenant)
	if !strings.HasPrefix(k, prefix+"{") || !strings.HasSuffix(k, "}") {
		t.Fatalf("Key(%q, %.40q) = %.80q: want prefix{...}", prefix, tenant, k)
	}
	tag, ok := hashTag(k)
	if !ok {
		t.Fatalf("Key(%q, %.40q) = %.80q has no hash tag", prefix, tenant, k)
	}
	if want := k[len(prefix)+1 : len(k)-1]; tag != want {
		t.Fatalf("Key(%q, %.40q) = %.80q: hash tag %q, want the whole braced part %q", prefix, tenant, k, tag, want)
	}
	if strings.ContainsAny(tag, "{}") {
		t.Fatalf("hash tag %q contains a brace", tag)
	}
	if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
		t.Fatalf("Key(%q, %.40q) = %.80q: want exactly one brace pair", prefix, tenant, k)
	}
	if Slot(k) != Slot(tag) || Slot(k) != Slot("{"+tag+"}") {
		t.Fatalf("Slot(%q) = %d, Slot(tag) = %d", k, Slot(k), Slot(tag))
	}
	return k
}

// decodeLiteral inverts the "t:" scheme; it proves that scheme injective.
func decodeLiteral(t testing.TB, tag string) string {
	t.Helper()
	s, ok := strings.CutPrefix(tag, "t:")
	if !ok {
		t.Fatalf("tag %q is not a literal encoding", tag)
	}
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			if !isLiteral(s[i]) {
				t.Fatalf("tag %q has byte %q outside the literal set", tag, s[i])
			}
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			t.Fatalf("tag %q: truncated escape", tag)
		}
		h := s[i+1 : i+3]
		if strings.ToUpper(h) != h {
			t.Fatalf("tag %q: escape %q not uppercase", tag, h)
		}
		v, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("tag %q: %v", tag, err)
		}
		if isLiteral(v[0]) {
			t.Fatalf("tag %q escapes %q, which is literal: two encodings of one byte", tag, v[0])
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String()
}

func TestKeyEncoding(t *testing.T) {
	long := strings.Repeat("x", maxLiteralTenant+1)
	sum := sha256.Sum256([]byte(long))
	for _, tc := range []struct{ tenant, want string }{
		{"", "p:{t:}"},
		{"acme", "p:{t:acme}"},
		{"Az09._:@/-", "p:{t:Az09._:@/-}"},
		{"a b", "p:{t:a%20b}"},
		{"{", "p:{t:%7B}"},
		{"}", "p:{t:%7D}"},
		{"a}b{c", "p:{t:a%7Db%7Bc}"},
		{"%", "p:{t:%25}"},
		{"t%3Ax", "p:{t:t%253Ax}"},
		{"\x00\n\xff", "p:{t:%00%0A%FF}"},
		{"é", "p:{t:%C3%A9}"},
		{strings.Repeat("x", maxLiteralTenant), "p:{t:" + strings.Repeat("x", maxLiteralTenant) + "}"},
		{long, "p:{h:" + hex.EncodeToString(sum[:]) + "}"},
	} {
		if got := Key("p:", tc.tenant); got != tc.want {
			t.Errorf("Key(p:, %.40q) = %q, want %q", tc.tenant, got, tc.want)
		}
		checkKey(t, "p:", tc.tenant)
	}
}

// hostileTenants are tenant names that break naive key schemes.
func hostileTenants() []string {
	huge := make([]byte, 1<<20)
	for i := range huge {
		huge[i] = "{}\n"[i%3]
	}
	huge2 := bytes.Clone(huge)
	huge2[len(huge2)-1] = 'x'
	a128 := strings.Repeat("a", maxLiteralTenant)
	longSum := sha256.Sum256([]byte(a128 + "a"))
	return []string{
		"", " ", "{", "}", "{}", "}{", "{{}}", "a}b{c", "{a}", "a{b}c",
		"\xff\xfe", "\x00", "\x00\x00", "\n", "\r\n", "%", "%25", "%%",
		"t:x", "t%3Ax", "t%253Ax", "x", "%78", "X", "h:" + hex.EncodeToString(longSum[:]),
		"t:", "h:", a128, a128 + "a", a128 + "b", string(huge), string(huge2),
		"tenant with spaces", "ünïcödé", "\u200b", "*", "?", "[a-z]",
	}
}

func TestKeyHostileTenantsDistinct(t *testing.T) {
	for _, prefix := range []string{"", "lq:", "a:b/c"} {
		seen := map[string]string{}
		for _, tenant := range hostileTenants() {
			k := checkKey(t, prefix, tenant)
			if other, dup := seen[k]; dup {
				t.Fatalf("tenants %.40q and %.40q share key %.80q", other, tenant, k)
			}
			seen[k] = tenant
			if Key(prefix, tenant) != k {
				t.Fatalf("Key is not deterministic for %.40q", tenant)
			}
			if tag, _ := hashTag(k); len(tenant) <= maxLiteralTenant && decodeLiteral(t, tag) != tenant {
				t.Fatalf("tag %q does not decode to %.40q", tag, tenant)
			}
		}
	}
}

func TestKeyLengthBounded(t *testing.T) {
	// Hashing long tenants keeps every key short, whatever the tenant.
	maxTag := len("t:") + 3*maxLiteralTenant
	for _, tenant := range hostileTenants() {
		tag, _ := hashTag(Key("", tenant))
		if len(tag) > maxTag {
			t.Errorf("tag of a %d-byte tenant has %d bytes, want <= %d", len(tenant), len(tag), maxTag)
		}
	}
}

func TestKeyProperties(t *testing.T) {
	// Byte strings around the 128-byte boundary, over all byte values, and
	// b often a one-byte edit of a so that near-collisions are exercised.
	tenant := rapid.Custom(func(t *rapid.T) string {
		return string(rapid.SliceOfN(rapid.Byte(), 0, 2*maxLiteralTenant+8).Draw(t, "bytes"))
	})
	rapid.Check(t, func(rt *rapid.T) {
		prefix := rapid.StringMatching(`[a-z:]{0,8}`).Draw(rt, "prefix")
		a := tenant.Draw(rt, "a")
		var b string
		switch rapid.IntRange(0, 3).Draw(rt, "how") {
		case 0:
			b = tenant.Draw(rt, "b")
		case 1: // change one byte
			if len(a) == 0 {
				b = "\x00"
				break
			}
			bs := []byte(a)
			i := rapid.IntRange(0, len(bs)-1).Draw(rt, "i")
			bs[i] ^= rapid.ByteRange(1, 255).Draw(rt, "x")
			b = string(bs)
		case 2: // append one byte
			b = a + string([]byte{rapid.Byte().Draw(rt, "c")})
		case 3:
			b = a
		}
		ka, kb := Key(prefix, a), Key(prefix, b)
		if (ka == kb) != (a == b) {
			rt.Fatalf("a=%q b=%q: keys %q %q", a, b, ka, kb)
		}
		for _, k := range []string{ka, kb} {
			tag, ok := hashTag(k)
			if !ok || strings.ContainsAny(tag, "{}") || k != prefix+"{"+tag+"}" {
				rt.Fatalf("key %q: bad hash tag %q", k, tag)
			}
		}
	})
}

func FuzzKey(f *testing.F) {
	f.Add("", "x")
	f.Add("{", "}")
	f.Add("a}b{c", "a%7Db%7Bc")
	f.Add("t:x", "t%3Ax")
	f.Add("\xff\xfe", "\xfe\xff")
	f.Add(strings.Repeat("a", maxLiteralTenant), strings.Repeat("a", maxLiteralTenant+1))
	f.Fuzz(func(t *testing.T, a, b string) {
		const prefix = "fz:"
		ka := checkKey(t, prefix, a)
		kb := checkKey(t, prefix, b)
		if Key(prefix, a) != ka || Key(prefix, b) != kb {
			t.Fatal("Key is not deterministic")
		}
		if (ka == kb) != (a == b) {
			t.Fatalf("a=%q b=%q: keys %q %q", a, b, ka, kb)
		}
	})
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "lq:", "rate:v1:", strings.Repeat("a", MaxPrefixLen), "a b\n\x00"} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%.20q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"{", "}", "a{b", "lq:}", "{x}:", strings.Repeat("a", MaxPrefixLen+1)} {
		err := ValidatePrefix(p)
		if !errors.Is(err, ErrBadPrefix) {
			t.Errorf("ValidatePrefix(%.20q) = %v, want ErrBadPrefix", p, err)
		}
		if _, err := NewClient(fakeNil{}, p); !errors.Is(err, ErrBadPrefix) {
			t.Errorf("NewClient(%.20q) = %v, want ErrBadPrefix", p, err)
		}
	}
}

// fakeNil is a Scripter that must never be called.
type fakeNil struct{ Scripter }

func TestSlotVectors(t *testing.T) {
	// Expected slots are CLUSTER KEYSLOT answers of redis-server 7.0.15 run
	// with --cluster-enabled yes (the test server is not a cluster, and
	// CLUSTER KEYSLOT is refused there).
	for _, tc := range []struct {
		key  string
		slot uint16
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"hello", 866},
		{"", 0},
		{"123456789", 12739},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"{}foo", 9500},         // empty tag: whole key
		{"foo{}{bar}", 8363},    // first tag empty: whole key
		{"foo{{bar}}zap", 4015}, // tag is "{bar"
		{"foo{bar}{zap}", 5061}, // first tag only: "bar"
		{"{", 4092},             // no closing brace
		{"}", 12090},            // no opening brace
		{"a}b{c", 13587},        // '}' before '{' does not close it
		{"{t:}", 4996},          // an empty tenant's tag
		{"prefix:{t:tenant-1}", 6476},
		{"lqtest:{h:0123}", 9121},
		{"\xff\xfe", 3374},
	} {
		if got := Slot(tc.key); got != tc.slot {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
	// CRC-16/XMODEM check value.
	if got := keyslot.CRC16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
}
