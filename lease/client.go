package lease

// A Client runs the scripts on a Redis client: its options, and what
// its calls share (keys, errors).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client runs the leasequota scripts on a Redis client. It holds no state of
// its own besides its configuration and is safe for concurrent use.
type Client struct {
	s        Scripter
	prefix   string
	instance string        // this client's id in the instance registry; "" for none
	window   time.Duration // how long an instance counts as active after an acquire
	batch    int           // tenants per acquire script call in AcquireMany (WithBatch)
	releases atomic.Uint64 // sequence of release ids, with instance

	// registry is the acquire arguments that name this instance and its
	// window (ARGV[4..5]), boxed once by NewClient: every acquire sends
	// them, and boxing a string allocates. releaseWindow is likewise the
	// release argument ReleaseDedupWindow, in milliseconds.
	registry      [2]interface{}
	releaseWindow interface{}
}

// ReleaseDedupWindow is how long the release script remembers the ids of
// releases it applied (clients with WithInstance): a retry of a release
// within this window is applied once.
const ReleaseDedupWindow = time.Minute

// A ClientOption configures a Client.
type ClientOption func(*Client)

// WithInstance makes every acquire register the caller as instance id in
// the tenant's instance registry (a hash next to the bucket, in the same
// slot) and report how many instances acquired for the tenant within the
// last window (Grant.Instances; an entry kept older than that for the
// rate share it holds is not counted). It
// also gives every release a unique id (instance id and a sequence
// number) that the release script remembers for ReleaseDedupWindow, so a
// release that go-redis retries after a lost reply credits the bucket
// once. Give each process its own random id. window must be at least a
// millisecond.
func WithInstance(id string, window time.Duration) ClientOption {
	return func(c *Client) { c.instance, c.window = id, window }
}

// WithBatch makes AcquireMany acquire for up to n tenants in each script
// call (one EVALSHA carrying n tenants' keys and arguments), instead of one
// call per tenant: each tenant is acquired for exactly as on its own, and
// the call's fixed cost in Redis (dispatch, the script's prologue, TIME,
// parsing and replying) is paid once per n tenants. Redis runs a call
// without interleaving others, so a larger n delays other clients' commands
// longer (about n times an acquire's cost). n must be at least 1 (1, the
// default, is no batching).
//
// Use it only with a client of one server (a *redis.Client, standalone or
// Sentinel): the keys of one call must all live on the server it is sent
// to, which a Cluster or a Ring does not ensure.
func WithBatch(n int) ClientOption {
	return func(c *Client) { c.batch = n }
}

// NewClient returns a Client that keeps buckets under prefix (see Key) on s.
// It fails with an error wrapping ErrBadPrefix when ValidatePrefix does, and
// with one wrapping ErrBadRequest for an invalid option value.
func NewClient(s Scripter, prefix string, opts ...ClientOption) (*Client, error) {
	if s == nil {
		return nil, errors.New("lease: NewClient: nil Scripter")
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	c := &Client{s: s, prefix: prefix, batch: 1}
	for _, o := range opts {
		o(c)
	}
	if c.batch < 1 {
		return nil, fmt.Errorf("%w: WithBatch(%d): want >= 1", ErrBadRequest, c.batch)
	}
	if c.instance != "" && c.window < time.Millisecond {
		return nil, fmt.Errorf("%w: WithInstance window %v: want >= 1ms", ErrBadRequest, c.window)
	}
	c.registry = [2]interface{}{c.instance, strconv.FormatInt(c.window.Milliseconds(), 10)}
	c.releaseWindow = strconv.FormatInt(ReleaseDedupWindow.Milliseconds(), 10)
	return c, nil
}

// ceilMillis returns d (>= 0) in milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// Key returns the Redis key of tenant's bucket, Key(prefix, tenant).
func (c *Client) Key(tenant string) string {
	return Key(c.prefix, tenant)
}

// commonFailure returns the error shared by all cmds when none of them got a
// reply from Redis, and nil otherwise. A Redis error reply (including a
// script's error_reply) is a reply: it concerns that command only.
func commonFailure(cmds []*redis.Cmd) error {
	var first error
	for _, cmd := range cmds {
		err := cmd.Err()
		if err == nil || isRedisError(err) {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return fmt.Errorf("lease: no reply from Redis: %w", first)
}

func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// scriptError wraps an error of a script call. The scripts' own argument
// checks ("leasequota: bad argument") also wrap ErrBadRequest; they can only
// fire when the Go checks and the script disagree. A nil reply, which
// go-redis gives as the error redis.Nil, wraps ErrBadReply: no script of
// lease's returns one, so it is a reply of an unexpected shape (a proxy
// that mangled it, another script under the digest) like any other.
func scriptError(op string, err error) error {
	switch {
	case redis.HasErrorPrefix(err, "leasequota: bad argument"):
		return fmt.Errorf("lease: %s: %w: %w", op, ErrBadRequest, err)
	case errors.Is(err, redis.Nil):
		return fmt.Errorf("%w: %s: a nil reply (%w)", ErrBadReply, op, err)
	}
	return fmt.Errorf("lease: %s: %w", op, err)
}

// Refuses dials Redis once, as the go-redis client's pool would, closes
// the connection, and reports whether Redis refuses connections: the dial
// failed with a connection refused, a unix socket that does not exist, a
// host or network unreachable, or a name that does not resolve. Anything
// else says nothing, and Refuses reports false: a dial that succeeded,
// ran out of time or failed otherwise (a reset under load, a client out
// of file descriptors), and a Scripter that is not a *redis.Client (a
// Cluster client, which is not dialed). A Sentinel failover client is
// dialed through its sentinels: when every one refuses, go-redis's error
// wraps their refusals and Refuses reports true (the client cannot reach
// its master without a sentinel).
//
// The dial is its Options' Dialer but for a TLS client, whose default
// Dialer does not heed ctx in the handshake (go-redis v9): that one dials
// the transport alone, where a refusal shows. So Refuses returns within
// ctx.
//
// Why: a call to a Redis that refuses connections times out like one to a
// busy Redis (go-redis retries the dial until the deadline), and the
// syncer must tell the two apart before any call of its own was
// answered. The pool's own count of connections cannot: under load it
// holds none for a while though Redis accepts them (a dial still under
// way, or connections dropped after their calls timed out).
func (c *Client) Refuses(ctx context.Context) bool {
	o, ok := c.s.(interface{ Options() *redis.Options })
	if !ok {
		return false
	}
	opt := o.Options()
	if opt == nil {
		return false
	}
	dial := opt.Dialer
	if dial == nil || opt.TLSConfig != nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, opt.Network, opt.Addr)
	if err == nil {
		conn.Close()
		return false
	}
	return refused(err)
}

// refused reports whether a dial's error says that nothing serves the
// address (see Refuses).
func refused(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.As(err, &dns) && dns.IsNotFound
}
