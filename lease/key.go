package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/leasequota/leasequota/internal/keyslot"
)

// ErrBadPrefix is returned (wrapped) by ValidatePrefix and NewClient when a
// key prefix cannot be used.
var ErrBadPrefix = errors.New("lease: bad key prefix")

// MaxPrefixLen is the longest key prefix ValidatePrefix accepts, in bytes.
const MaxPrefixLen = 256

// maxLiteralTenant is the longest tenant, in bytes, that is percent-encoded
// into its key. Longer tenants are hashed so that keys stay short: a
// percent-encoded tenant grows up to three times its length, and a key is
// sent with every acquire.
const maxLiteralTenant = 128

// Scheme tags of the encoded tenant. They differ, so a percent-encoded
// tenant can never equal a hashed one.
const (
	literalTag = "t:"
	hashedTag  = "h:"
)

// Key returns the Redis key of tenant's bucket: prefix + "{" + enc(tenant) + "}".
//
// enc is injective and its output is non-empty and contains no '{' or '}',
// so:
//   - distinct tenants get distinct keys, whatever bytes they contain
//     (empty, NUL, newlines, braces, invalid UTF-8, megabytes);
//   - the braces Key adds form the key's hash tag (when prefix has no
//     braces, see ValidatePrefix), so a Redis Cluster slot depends on the
//     tenant only, never on the prefix, and no tenant can pick its slot by
//     smuggling in braces.
//
// enc(tenant) is "t:" followed by the tenant with every byte outside
// [A-Za-z0-9._:@/-] written as %XX (uppercase hex) when the tenant has at
// most 128 bytes, and "h:" followed by the lowercase hex SHA-256 of the
// tenant otherwise. Key does not validate prefix; NewClient does.
func Key(prefix, tenant string) string {
	var b strings.Builder
	b.Grow(keyLen(prefix, tenant))
	writeKey(&b, prefix, tenant)
	return b.String()
}

// keyLen returns len(Key(prefix, tenant)).
func keyLen(prefix, tenant string) int {
	if len(tenant) > maxLiteralTenant {
		return len(prefix) + 2 + len(hashedTag) + hex.EncodedLen(sha256.Size)
	}
	n := len(prefix) + 2 + len(literalTag) + len(tenant)
	for i := 0; i < len(tenant); i++ {
		if !isLiteral(tenant[i]) {
			n += 2 // %XX for the byte
		}
	}
	return n
}

// writeKey writes Key(prefix, tenant) to b.
func writeKey(b *strings.Builder, prefix, tenant string) {
	b.WriteString(prefix)
	b.WriteByte('{')
	if len(tenant) > maxLiteralTenant {
		sum := sha256.Sum256([]byte(tenant))
		b.WriteString(hashedTag)
		var h [2 * sha256.Size]byte
		hex.Encode(h[:], sum[:])
		b.Write(h[:])
		b.WriteByte('}')
		return
	}
	b.WriteString(literalTag)
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		if isLiteral(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0f])
	}
	b.WriteByte('}')
}

// unescapeTenant undoes Key's percent-encoding of a tenant of at most 128
// bytes: enc is "t:" and the encoded tenant. It accepts more than Key
// writes (literal bytes escaped, for one); callers check that the result
// encodes back to enc.
func unescapeTenant(enc string) (string, error) {
	s, ok := strings.CutPrefix(enc, literalTag)
	if !ok {
		return "", errors.New("no literal tag")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("cut escape")
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", errors.New("bad escape")
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

// unhex is the value of an uppercase hex digit, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// isLiteral reports whether c is copied as is into an encoded tenant. The
// set excludes '%' (the escape byte, so decoding is unambiguous), '{' and
// '}' (they would end or restart the hash tag), and every space, control
// and non-ASCII byte, so keys stay printable in logs and redis-cli.
func isLiteral(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '@', c == '/', c == '-':
		return true
	}
	return false
}

// ValidatePrefix reports whether prefix can be put before the tenant's hash
// tag. A prefix with '{' or '}' would take over the hash tag (Redis uses the
// first '{' of the key), and a long prefix is almost surely a mistake that
// would be paid on every call. Errors wrap ErrBadPrefix.
func ValidatePrefix(prefix string) error {
	if len(prefix) > MaxPrefixLen {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadPrefix, len(prefix), MaxPrefixLen)
	}
	if i := strings.IndexAny(prefix, "{}"); i >= 0 {
		return fmt.Errorf("%w: %q at byte %d: braces would change the key's hash tag", ErrBadPrefix, prefix[i], i)
	}
	return nil
}

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = keyslot.NumSlots

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key mod 16384, where only the hash tag is hashed when the key has one (the
// bytes between the first '{' and the first '}' after it, when there is at
// least one byte between them).
func Slot(key string) uint16 { return keyslot.Of(key) }

// The suffixes of the keys beside a tenant's bucket. They have no
// braces, so all of a tenant's keys share its hash tag and cluster slot.
const (
	instancesSuffix = ":i"
	quotaSuffix     = ":q"
	releasesSuffix  = ":r"
)

// InstancesKey returns the key of the instance registry that goes with the
// bucket at bucketKey: the same key with ":i" appended. The suffix has no
// braces, so both keys share the tenant's hash tag and cluster slot.
func InstancesKey(bucketKey string) string {
	return bucketKey + instancesSuffix
}

// QuotaKey returns the key of the quota override that goes with the bucket
// at bucketKey (":q" appended; same slot). See Client.SetOverride.
func QuotaKey(bucketKey string) string {
	return bucketKey + quotaSuffix
}

// ReleasesKey returns the key of the set of applied release ids that goes
// with the bucket at bucketKey (":r" appended; same slot).
func ReleasesKey(bucketKey string) string {
	return bucketKey + releasesSuffix
}

// ProbeKey returns the key under prefix that ProbeWrite deletes, which
// nothing sets. It has no hash tag, so it cannot be any tenant's key.
func ProbeKey(prefix string) string {
	return prefix + "probe"
}

// QuotaVersionKey returns the key of the counter that SetOverride and
// DeleteOverride raise for every change under prefix. Instances poll it
// (one GET per round) and re-read their tenants' quotas only when it
// moved. It has no hash tag, so it cannot be any tenant's key.
func QuotaVersionKey(prefix string) string {
	return prefix + "quota-version"
}
