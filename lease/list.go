package lease

// Listing the quota overrides stored under a prefix: SCAN on every node,
// never KEYS.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrNameUnknown is wrapped by the error ListOverrides yields with an
// override stored under a hashed key (a tenant longer than 128 bytes, see
// Key) without the tenant's name: one written by a client from before
// quota.lua stored the name (field n). The key does not give the name
// back. SetOverride for the tenant stores it again with its name.
var ErrNameUnknown = errors.New("lease: override without its tenant's name")

// ListScanCount is the COUNT hint of every SCAN that ListOverrides sends:
// how many keys a node looks at per call. The calls return the matching
// keys only (a tenant's bucket, registry and release ids do not match),
// and the overrides of each call's keys are read in one pipeline.
const ListScanCount = 1000

// ListedOverride is a quota override that ListOverrides found.
type ListedOverride struct {
	// Tenant is the tenant the override is stored for. It is "" only with
	// an error wrapping ErrNameUnknown (a tenant name may be "" too).
	Tenant string
	// Key is the override's key (QuotaKey). An in-process Store, which has
	// no key space, gives the key under the prefix "".
	Key string
	// Override is the override as stored (zero with an error about it).
	Override Override
}

// ListOverrides returns an iterator over the quota overrides stored under
// the client's prefix (those SetOverride writes), in no particular order.
// It SCANs every master of a Redis Cluster (in turn) or the one server
// of any other client, with a MATCH pattern of the prefix's override keys
// (the prefix's glob characters escaped) and COUNT ListScanCount, and
// reads each page's overrides in one pipeline. It does not need
// WithInstance: a command can make a Client with NewClient(rdb, prefix)
// and list.
//
// The iterator yields each override with a nil error, or an error:
//
//   - about one override, with its Key: ErrNameUnknown (see there; its
//     Override is filled), or ErrBadReply for an override that cannot be
//     read (a corrupt hash, or a key that is not the prefix's layout).
//     Listing goes on after these.
//   - about the listing: a SCAN or a read failed, or ctx is done (it is
//     checked before each yield). It is the last value yielded.
//
// SCAN's guarantees carry over, on one server and on a Redis Cluster whose
// slots stay put: an override stored for the whole listing is yielded at
// least once; one set or deleted meanwhile may or may not be (a deleted
// one is never yielded as a zero value); one may be yielded twice (Redis
// rehashing). On a Cluster whose slots move during the listing (a
// reshard), the masters are scanned one after the other, so an override
// may be yielded twice (its slot moved to a master not scanned yet) or not
// at all (moved from a master not scanned yet to one scanned already):
// list again once the reshard is done. Callers that need each once keep
// the keys seen.
func (c *Client) ListOverrides(ctx context.Context) iter.Seq2[ListedOverride, error] {
	return func(yield func(ListedOverride, error) bool) {
		scanners, err := c.scanners(ctx)
		if err != nil {
			yield(ListedOverride{}, err)
			return
		}
		match := escapeGlob(c.prefix) + "{*}:q"
		for _, s := range scanners {
			if !c.listNode(ctx, s, match, yield) {
				return
			}
		}
	}
}

// scanner is the part of a go-redis client that ListOverrides SCANs.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// scanners returns a scanner per node of the client's keyspace: every
// master of a cluster, every shard of a ring, else the client itself.
func (c *Client) scanners(ctx context.Context) ([]scanner, error) {
	var (
		mu  sync.Mutex
		out []scanner
	)
	collect := func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		out = append(out, node)
		mu.Unlock()
		return nil
	}
	switch s := c.s.(type) {
	case interface {
		ForEachMaster(context.Context, func(context.Context, *redis.Client) error) error
	}:
		if err := s.ForEachMaster(ctx, collect); err != nil {
			return nil, fmt.Errorf("lease: list overrides: cluster masters: %w", err)
		}
		return out, nil
	case interface {
		ForEachShard(context.Context, func(context.Context, *redis.Client) error) error
	}:
		if err := s.ForEachShard(ctx, collect); err != nil {
			return nil, fmt.Errorf("lease: list overrides: ring shards: %w", err)
		}
		return out, nil
	case scanner:
		return []scanner{s}, nil
	}
	return nil, fmt.Errorf("lease: list overrides: %T has no SCAN: %w", c.s, errors.ErrUnsupported)
}

// listNode lists the overrides on one node, and reports whether to go on.
func (c *Client) listNode(ctx context.Context, s scanner, match string, yield func(ListedOverride, error) bool) bool {
	var cursor uint64
	for {
		keys, next, err := s.Scan(ctx, cursor, match, ListScanCount).Result()
		if err != nil {
			yield(ListedOverride{}, fmt.Errorf("lease: list overrides: scan: %w", err))
			return false
		}
		if len(keys) > 0 {
			cmds, err := c.readOverrides(ctx, keys)
			if err != nil {
				yield(ListedOverride{}, err)
				return false
			}
			for i, key := range keys {
				lo, ok, err := c.listed(key, cmds[i])
				if !ok {
					continue // deleted since the SCAN
				}
				if cerr := ctx.Err(); cerr != nil {
					yield(ListedOverride{}, fmt.Errorf("lease: list overrides: %w", cerr))
					return false
				}
				if !yield(lo, err) {
					return false
				}
			}
		}
		if next == 0 {
			return true
		}
		cursor = next
	}
}

// overrideFields are the fields of an override hash ListOverrides reads:
// those of the scripts (read_override), and the name.
var overrideFields = []string{"r", "b", "min", "max", "ttl", "mode", "n"}

// readOverrides reads the overrides at keys in one pipeline (split per
// node by a cluster client). It fails only when none got a reply.
func (c *Client) readOverrides(ctx context.Context, keys []string) ([]*redis.SliceCmd, error) {
	p := c.s.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = p.HMGet(ctx, k, overrideFields...)
	}
	_, _ = p.Exec(ctx) // each command keeps its own error
	var first error
	for _, cmd := range cmds {
		err := cmd.Err()
		if err == nil || isRedisError(err) {
			return cmds, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, fmt.Errorf("lease: list overrides: read: %w", first)
}

// listed decodes the override at key as read by cmd. ok is false when
// the key holds no override (deleted since the SCAN, or without r or b).
func (c *Client) listed(key string, cmd *redis.SliceCmd) (lo ListedOverride, ok bool, err error) {
	lo.Key = key
	v, err := cmd.Result()
	if err != nil {
		return lo, true, fmt.Errorf("lease: list overrides: read %q: %w", key, err)
	}
	if len(v) != len(overrideFields) {
		return lo, true, fmt.Errorf("%w: list overrides: %q: %d fields, want %d", ErrBadReply, key, len(v), len(overrideFields))
	}
	// Without both r and b the hash is no override, as every script reads
	// it (read_override, quota.lua's get): acquires apply the quota passed.
	// Listed, one with b alone was a bad reply that GetOverride and the
	// scripts never saw.
	if v[0] == nil || v[1] == nil {
		return lo, false, nil
	}
	fields := make([]interface{}, 6)
	for i := range fields {
		if v[i] == nil {
			fields[i] = "0" // as quota.lua's get: a missing lease field is 0
			continue
		}
		fields[i] = v[i]
	}
	o, err := parseOverride(fields)
	if err != nil || o == nil {
		return lo, true, fmt.Errorf("%w: list overrides: %q: %v", ErrBadReply, key, err)
	}
	lo.Override = *o
	name, named := v[6].(string)
	lo.Tenant, err = c.tenantOf(key, name, named)
	return lo, true, err
}

// tenantOf returns the tenant whose override key is key, from its stored
// name when named, else from the key itself when it is not hashed.
func (c *Client) tenantOf(key, name string, named bool) (string, error) {
	if named {
		if QuotaKey(c.Key(name)) != key {
			return "", fmt.Errorf("%w: list overrides: %q holds the name %.64q of another key", ErrBadReply, key, name)
		}
		return name, nil
	}
	enc, ok := strings.CutPrefix(key, c.prefix+"{")
	if ok {
		enc, ok = strings.CutSuffix(enc, "}:q")
	}
	if !ok || strings.ContainsAny(enc, "{}") {
		return "", fmt.Errorf("%w: list overrides: %q is not an override key of prefix %q", ErrBadReply, key, c.prefix)
	}
	if strings.HasPrefix(enc, hashedTag) {
		return "", fmt.Errorf("%w: %q", ErrNameUnknown, key)
	}
	tenant, err := unescapeTenant(enc)
	if err != nil || QuotaKey(c.Key(tenant)) != key {
		return "", fmt.Errorf("%w: list overrides: %q is not an override key of prefix %q", ErrBadReply, key, c.prefix)
	}
	return tenant, nil
}

// escapeGlob escapes the characters that a Redis MATCH pattern gives a
// meaning (*, ?, [, ] and the escape \), so that s matches only itself.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
