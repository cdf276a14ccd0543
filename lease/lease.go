package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrBadRequest is returned (wrapped, naming the field) for an invalid rate,
// burst, want or amount. Such requests are never sent to Redis.
var ErrBadRequest = errors.New("lease: bad request")

// ErrBadReply is returned (wrapped) when Redis answers a script call with a
// reply of an unexpected shape, e.g. because another script was loaded under
// the same digest or a proxy mangled the reply.
var ErrBadReply = errors.New("lease: unexpected script reply")

// Bounds of Limits. They keep every quantity the scripts compute exactly
// representable in a float64 (2^40 tokens with microsecond-scale fractions)
// and every TTL within what PEXPIRE accepts.
const (
	MaxRate  = 1e12    // tokens per second
	MaxBurst = 1 << 40 // tokens
)

// Limits are a tenant's global bucket: Burst tokens of capacity, refilled at
// Rate tokens per second.
type Limits struct {
	Rate  float64 // tokens added per second; finite, > 0, <= MaxRate
	Burst int64   // capacity in tokens; 1..MaxBurst
}

// Validate reports whether l can be sent to Redis (see Check). Errors wrap
// ErrBadRequest and name the field.
func (l Limits) Validate() error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// Check returns why l is not a bucket the scripts can keep, naming the
// field, or nil: Rate must be finite, > 0 and <= MaxRate; Burst must be in
// 1..MaxBurst. It is the one statement of that rule: its error wraps no
// sentinel and has no package prefix, so that each caller wraps it in its
// own (Validate in ErrBadRequest, package quota in its ErrInvalid).
func (l Limits) Check() error {
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate <= 0 || l.Rate > MaxRate {
		return fmt.Errorf("Rate is %v, want a finite number in (0, %g]", l.Rate, float64(MaxRate))
	}
	if l.Burst < 1 || l.Burst > MaxBurst {
		return fmt.Errorf("Burst is %d, want 1..%d", l.Burst, int64(MaxBurst))
	}
	return nil
}

// Grant is the outcome of one acquire on a tenant's global bucket.
type Grant struct {
	Granted int64   // tokens granted, 0..want; fewer than asked is a partial grant
	Tokens  float64 // tokens left in the global bucket after this call
	// ServerTime is the bucket's time of this call: Redis TIME when the
	// script ran, in microseconds, or a microsecond after the bucket's
	// previous call if the clock has not moved past it (so a bucket's calls
	// have distinct times; see GrantID).
	ServerTime time.Time
	// Instances is how many instances acquired for the tenant within the
	// client's window, this one included; 0 without WithInstance.
	Instances int
	// Share is the caller's max-min fair share of the rate, in tokens per
	// second, among the demands the active instances reported
	// (Request.Demand); 0 when unknown (no WithInstance).
	Share float64
	// Override is the tenant's quota override stored in Redis (see
	// Client.SetOverride), nil when none is: the script applied its rate
	// and burst instead of the request's.
	Override *Override
}

// Override is a tenant's quota stored in Redis next to its bucket
// (QuotaKey). Its Rate and Burst replace those every instance passes to
// the scripts; the lease fields are carried for the instances, which
// resolve zero fields to their own defaults.
type Override struct {
	Rate     float64
	Burst    int64
	MinLease int64
	MaxLease int64
	LeaseTTL time.Duration
	Mode     uint8
}

// Validate reports whether o can be stored: its Limits valid and the lease
// fields >= 0. Errors wrap ErrBadRequest.
func (o Override) Validate() error {
	if err := (Limits{Rate: o.Rate, Burst: o.Burst}).Validate(); err != nil {
		return err
	}
	if o.MinLease < 0 || o.MaxLease < 0 || o.LeaseTTL < 0 {
		return fmt.Errorf("%w: Override lease fields must be >= 0: %+v", ErrBadRequest, o)
	}
	return nil
}

// RetryAfter estimates how long from g.ServerTime until the global bucket
// holds need tokens if nobody takes any, refilling at rate tokens per
// second: 0 when g.Tokens >= need, else (need - Tokens)/rate seconds rounded
// up to the microsecond. It returns math.MaxInt64 (“never”) when rate is not
// a positive number or the wait does not fit a time.Duration. It knows
// nothing of burst: a need above burst is never met, which callers check.
func (g Grant) RetryAfter(need int64, rate float64) time.Duration {
	missing := float64(need) - g.Tokens
	if !(missing > 0) { // also when Tokens is NaN: nothing sensible to wait for
		return 0
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		return math.MaxInt64
	}
	us := math.Ceil(missing / rate * 1e6)
	// float64(MaxInt64/1000) is that integer rounded up by at most one (it
	// is above 2^53, where float64s are even); any whole float64 below it,
	// times 1000, still fits an int64.
	if !(us < float64(math.MaxInt64/int64(time.Microsecond))) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// Client runs the leasequota scripts on a Redis client. It holds no state of
// its own besides its configuration and is safe for concurrent use.
type Client struct {
	s        Scripter
	prefix   string
	instance string        // this client's id in the instance registry; "" for none
	window   time.Duration // how long an instance counts as active after an acquire
	releases atomic.Uint64 // sequence of release ids, with instance
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
// last window (Grant.Instances). It also gives every release a unique id
// (instance id and a sequence number) that the release script remembers
// for ReleaseDedupWindow, so a release that go-redis retries after a lost
// reply credits the bucket once. Give each process its own random id.
// window must be at least a millisecond.
func WithInstance(id string, window time.Duration) ClientOption {
	return func(c *Client) { c.instance, c.window = id, window }
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
	c := &Client{s: s, prefix: prefix}
	for _, o := range opts {
		o(c)
	}
	if c.instance != "" && c.window < time.Millisecond {
		return nil, fmt.Errorf("%w: WithInstance window %v: want >= 1ms", ErrBadRequest, c.window)
	}
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

// releaseCall returns the keys and arguments of one release (args from
// releaseArgs): the grant the tokens come from (0 for unknown) and, with an
// instance id, a fresh release id for deduplication.
func (c *Client) releaseCall(tenant string, args []interface{}, grant GrantID) call {
	key := c.Key(tenant)
	keys := []string{key, ReleasesKey(key), QuotaKey(key)}
	args = append(args, strconv.FormatUint(uint64(grant), 10))
	if c.instance == "" {
		return call{keys: keys, args: args}
	}
	id := c.instance + ":" + strconv.FormatUint(c.releases.Add(1), 10)
	args = append(args, id, strconv.FormatInt(ReleaseDedupWindow.Milliseconds(), 10))
	return call{keys: keys, args: args}
}

// acquireCall returns the keys and arguments of one acquire.
func (c *Client) acquireCall(tenant string, lim Limits, want int64, demand float64) (call, error) {
	args, err := acquireArgs(lim, want)
	if err != nil {
		return call{}, err
	}
	key := c.Key(tenant)
	keys := []string{key, InstancesKey(key), QuotaKey(key)}
	if c.instance == "" {
		return call{keys: keys, args: args}, nil
	}
	if !(demand >= 0) || math.IsInf(demand, 0) {
		demand = 0
	}
	args = append(args, c.instance, strconv.FormatInt(c.window.Milliseconds(), 10), strconv.FormatFloat(demand, 'f', -1, 64))
	return call{keys: keys, args: args}, nil
}

// Key returns the Redis key of tenant's bucket, Key(prefix, tenant).
func (c *Client) Key(tenant string) string {
	return Key(c.prefix, tenant)
}

// Acquire takes up to want tokens from tenant's global bucket, after
// refilling it from the Redis clock. It grants min(want, whole tokens in the
// bucket): a partial or zero grant is not an error. want 0 only refills and
// reports the bucket. Invalid arguments fail with an error wrapping
// ErrBadRequest, without calling Redis.
func (c *Client) Acquire(ctx context.Context, tenant string, lim Limits, want int64) (Grant, error) {
	cl, err := c.acquireCall(tenant, lim, want, 0)
	if err != nil {
		return Grant{}, err
	}
	cmd := acquireScript.run(ctx, c.s, cl.keys, cl.args...)
	return parseGrant(cmd, want)
}

// Return is the outcome of one release.
type Return struct {
	// Credited is how many of the returned tokens were added to the bucket,
	// 0..amount: what the bucket would hold more now had they never been
	// granted (see Release). The rest are lost, as if spent.
	Credited float64
	Tokens   float64 // tokens in the global bucket after this call
	// ServerTime is the bucket's time of this call, as in Grant.
	ServerTime time.Time
}

// Release gives amount unused tokens back to tenant's global bucket. age
// must be an upper bound of how long before the release runs in Redis the
// oldest of them was granted: measure it from before the acquire that got
// them was sent, and allow for the release's own latency (its timeout, say).
// An age that is too small may over-credit; one that is too large only
// credits less. It is rounded up to whole milliseconds.
//
// The bucket is credited only with what it would hold now had those tokens
// never been granted: min(amount, Burst - P), where P is the bucket's
// highest level since the grant (tokens above Burst would have been lost
// to the cap), taken from a level history the bucket keeps (see the package
// doc). Release knows the grant only as now - age, so P also counts the
// levels between that time and the grant, including the level just before
// the grant's own debit: tokens granted from a full bucket get no credit.
// Name the grant (ReleaseRequest.Grant) to leave those out. Nothing is
// credited for tokens granted before a change of burst or of the quota
// override.
// This keeps the bound of the package doc over every window, however late
// tokens come back. Return.Credited says how many were credited.
//
// Releasing into a missing key (a full bucket, see the package doc) leaves
// it missing, credits nothing and reports Burst. Release with amount 0 does
// not call Redis and returns a zero Return. Invalid arguments (including a
// negative age) fail with an error wrapping ErrBadRequest, without calling
// Redis.
//
// Without WithInstance, Release is not idempotent: a release that is
// retried after its reply was lost may credit the bucket twice. With it,
// each release carries a unique id and is applied at most once (a replay
// credits 0). Either way, give back only tokens that were leased and not
// spent, each at most once.
func (c *Client) Release(ctx context.Context, tenant string, lim Limits, amount int64, age time.Duration) (Return, error) {
	args, err := releaseArgs(lim, amount, age)
	if err != nil {
		return Return{}, err
	}
	if amount == 0 {
		return Return{}, nil
	}
	cl := c.releaseCall(tenant, args, 0)
	cmd := releaseScript.run(ctx, c.s, cl.keys, cl.args...)
	return parseRelease(cmd, amount)
}

// Request is one tenant's acquire in AcquireMany.
type Request struct {
	Tenant string
	Limits Limits
	Want   int64 // >= 0
	// Demand is the caller's estimate of its demand for the tenant, in
	// tokens per second, recorded in the instance registry (WithInstance)
	// so that each instance learns its max-min fair share (Grant.Share).
	Demand float64
}

// Result is the outcome of one Request: a Grant, or the error of that
// request alone.
type Result struct {
	Grant Grant
	Err   error
}

// AcquireMany acquires for many tenants in one pipelined round trip (per
// Redis node on a cluster: go-redis splits the pipeline by node), plus one
// more only if some node had lost the script. Each request behaves like
// Acquire; results[i] is the outcome of reqs[i].
//
// results is reused when its capacity is at least len(reqs) and allocated
// otherwise (pass nil to always allocate); the slice holding the results
// is returned. Invalid requests get an error wrapping ErrBadRequest in
// their Result and are not sent.
//
// The returned error is non-nil only when the failure affected every request
// that was sent: none got a reply from Redis (connection refused, timeout,
// canceled context). That error is then also in each sent request's Result,
// so callers may look at results alone.
func (c *Client) AcquireMany(ctx context.Context, reqs []Request, results []Result) ([]Result, error) {
	if cap(results) >= len(reqs) {
		results = results[:len(reqs)]
	} else {
		results = make([]Result, len(reqs))
	}
	calls := make([]call, 0, len(reqs))
	sent := make([]int, 0, len(reqs)) // sent[j] is the index in reqs of calls[j]
	for i := range reqs {
		results[i] = Result{}
		cl, err := c.acquireCall(reqs[i].Tenant, reqs[i].Limits, reqs[i].Want, reqs[i].Demand)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls = append(calls, cl)
		sent = append(sent, i)
	}
	if len(calls) == 0 {
		return results, nil
	}
	cmds := acquireScript.runMany(ctx, c.s, calls)
	for j, cmd := range cmds {
		i := sent[j]
		results[i].Grant, results[i].Err = parseGrant(cmd, reqs[i].Want)
	}
	return results, commonFailure(cmds)
}

// ReleaseRequest is one tenant's release in ReleaseMany.
type ReleaseRequest struct {
	Tenant string
	Limits Limits
	Amount int64         // >= 0; 0 is not sent
	Age    time.Duration // >= 0; see Release
	// Grant is the ID of the oldest grant the returned tokens come from
	// (Grant.ID), or zero for unknown. With it, the credit counts only the
	// bucket's levels after that grant's debit; without it, the levels
	// since now - Age (see Release). With it, Age need only be below about
	// 71 minutes (2^32 µs), to tell which time the ID's low bits are: a
	// release that reaches Redis later than Age allows is still judged
	// from its grant. For the tokens of one
	// grant that is exact, unless the bucket's history merged entries
	// around it; for tokens of several grants, the later grants' own levels
	// before their debits count too, which only credits less.
	Grant GrantID
}

// GrantID identifies a grant to the release script: the low 32 bits of
// its Redis time in microseconds (the times of a bucket's calls are
// distinct, and with an age below 2^32 µs, about 71 minutes, the low bits
// tell which time it is). The zero GrantID identifies none.
type GrantID uint32

// ID returns g's GrantID: zero for a Grant without a ServerTime (and in
// the 1 in 2^32 case of a time whose low bits are zero).
func (g Grant) ID() GrantID {
	if g.ServerTime.IsZero() {
		return 0
	}
	return GrantID(uint32(g.ServerTime.UnixMicro()))
}

// ReleaseResult is the outcome of one ReleaseRequest: a Return, or the
// error of that request alone.
type ReleaseResult struct {
	Return Return
	Err    error
}

// ReleaseMany releases for many tenants in one pipelined round trip, like
// AcquireMany; each request behaves like Release. It returns one result
// per request (so len is len(reqs)); a request with Amount 0 is not sent
// and gets a zero Return and a nil Err. Invalid requests get an error
// wrapping ErrBadRequest and are not sent. The Release caveats about age
// and retries apply.
func (c *Client) ReleaseMany(ctx context.Context, reqs []ReleaseRequest) []ReleaseResult {
	res := make([]ReleaseResult, len(reqs))
	calls := make([]call, 0, len(reqs))
	sent := make([]int, 0, len(reqs))
	for i := range reqs {
		args, err := releaseArgs(reqs[i].Limits, reqs[i].Amount, reqs[i].Age)
		if err != nil {
			res[i].Err = err
			continue
		}
		if reqs[i].Amount == 0 {
			continue
		}
		calls = append(calls, c.releaseCall(reqs[i].Tenant, args, reqs[i].Grant))
		sent = append(sent, i)
	}
	if len(calls) == 0 {
		return res
	}
	for j, cmd := range releaseScript.runMany(ctx, c.s, calls) {
		i := sent[j]
		res[i].Return, res[i].Err = parseRelease(cmd, reqs[i].Amount)
	}
	return res
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

// formatRate writes rate so that Lua's tonumber reads back the same
// float64: the shortest decimal that round-trips, without an exponent
// (some Lua implementations, like the one in miniredis, read "1e+06" as
// an invalid integer).
func formatRate(rate float64) string {
	return strconv.FormatFloat(rate, 'f', -1, 64)
}

// Validate reports whether r can be sent: valid Limits and Want >= 0.
// Errors wrap ErrBadRequest and name the field. Every Store checks it
// before touching a bucket, so an invalid request changes nothing.
func (r Request) Validate() error {
	if err := r.Limits.Validate(); err != nil {
		return err
	}
	if r.Want < 0 {
		return fmt.Errorf("%w: want %d: must be >= 0", ErrBadRequest, r.Want)
	}
	return nil
}

// Validate reports whether r can be sent: valid Limits, Amount >= 0 and
// Age >= 0. Errors wrap ErrBadRequest and name the field. Every Store
// checks it before touching a bucket, so an invalid release changes
// nothing.
func (r ReleaseRequest) Validate() error {
	if err := r.Limits.Validate(); err != nil {
		return err
	}
	if r.Amount < 0 {
		return fmt.Errorf("%w: amount %d: must be >= 0", ErrBadRequest, r.Amount)
	}
	if r.Age < 0 {
		return fmt.Errorf("%w: age %v: must be >= 0", ErrBadRequest, r.Age)
	}
	return nil
}

func acquireArgs(lim Limits, want int64) ([]interface{}, error) {
	if err := (Request{Limits: lim, Want: want}).Validate(); err != nil {
		return nil, err
	}
	return []interface{}{formatRate(lim.Rate), strconv.FormatInt(lim.Burst, 10), strconv.FormatInt(want, 10)}, nil
}

func releaseArgs(lim Limits, amount int64, age time.Duration) ([]interface{}, error) {
	if err := (ReleaseRequest{Limits: lim, Amount: amount, Age: age}).Validate(); err != nil {
		return nil, err
	}
	return []interface{}{formatRate(lim.Rate), strconv.FormatInt(lim.Burst, 10), strconv.FormatInt(amount, 10),
		strconv.FormatInt(ceilMillis(age), 10)}, nil
}

// scriptError wraps an error of a script call. The scripts' own argument
// checks ("leasequota: bad argument") also wrap ErrBadRequest; they can only
// fire when the Go checks and the script disagree.
func scriptError(op string, err error) error {
	if redis.HasErrorPrefix(err, "leasequota: bad argument") {
		return fmt.Errorf("lease: %s: %w: %w", op, ErrBadRequest, err)
	}
	return fmt.Errorf("lease: %s: %w", op, err)
}

// parseGrant decodes acquire.lua's reply {granted, "tokens", now_us}.
func parseGrant(cmd *redis.Cmd, want int64) (Grant, error) {
	v, err := cmd.Result()
	if err != nil {
		return Grant{}, scriptError("acquire", err)
	}
	a, ok := v.([]interface{})
	// Fewer than six elements: a reply of an older script, without the
	// share (and the override).
	if !ok || len(a) < 4 || len(a) > 6 {
		return Grant{}, fmt.Errorf("%w: acquire: want a 6-element array, got %T %v", ErrBadReply, v, v)
	}
	granted, err := replyInt(a[0])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: acquire: granted: %w", ErrBadReply, err)
	}
	tokens, err := replyFloat(a[1])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: acquire: tokens: %w", ErrBadReply, err)
	}
	now, err := replyInt(a[2])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: acquire: time: %w", ErrBadReply, err)
	}
	instances, err := replyInt(a[3])
	if err != nil {
		return Grant{}, fmt.Errorf("%w: acquire: instances: %w", ErrBadReply, err)
	}
	if granted < 0 || granted > want {
		return Grant{}, fmt.Errorf("%w: acquire: granted %d of %d", ErrBadReply, granted, want)
	}
	var o *Override
	if len(a) >= 5 {
		if o, err = parseOverride(a[4]); err != nil {
			return Grant{}, fmt.Errorf("%w: acquire: override: %w", ErrBadReply, err)
		}
	}
	var share float64
	if len(a) == 6 {
		if str, ok := a[5].(string); !ok || str != "" {
			if share, err = replyFloat(a[5]); err != nil || share < 0 {
				return Grant{}, fmt.Errorf("%w: acquire: share: %v %w", ErrBadReply, a[5], err)
			}
		}
	}
	return Grant{Granted: granted, Tokens: tokens, ServerTime: time.UnixMicro(now), Instances: int(instances), Override: o, Share: share}, nil
}

// parseOverride decodes an override as the scripts return it: 0 for none,
// else {r, b, min, max, ttl, mode}.
func parseOverride(v interface{}) (*Override, error) {
	if n, ok := v.(int64); ok && n == 0 {
		return nil, nil
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 6 {
		return nil, fmt.Errorf("want 0 or a 6-element array, got %T %v", v, v)
	}
	rate, err := replyFloat(a[0])
	if err != nil {
		return nil, fmt.Errorf("rate: %w", err)
	}
	var ints [5]int64
	for i := range ints {
		if ints[i], err = replyInt(a[i+1]); err != nil {
			return nil, fmt.Errorf("field %d: %w", i+1, err)
		}
	}
	if ints[4] < 0 || ints[4] > math.MaxUint8 {
		return nil, fmt.Errorf("mode %d out of range", ints[4])
	}
	o := &Override{Rate: rate, Burst: ints[0], MinLease: ints[1], MaxLease: ints[2], LeaseTTL: time.Duration(ints[3]), Mode: uint8(ints[4])}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// GetOverride returns the quota override stored for tenant, or nil when
// there is none.
func (c *Client) GetOverride(ctx context.Context, tenant string) (*Override, error) {
	key := c.Key(tenant)
	v, err := quotaScript.run(ctx, c.s, []string{key, QuotaKey(key)}, "get").Result()
	if err != nil {
		return nil, scriptError("get quota", err)
	}
	o, err := parseOverride(v)
	if err != nil {
		return nil, fmt.Errorf("%w: get quota: %w", ErrBadReply, err)
	}
	return o, nil
}

// SetOverride stores o as tenant's quota, replacing the rate and burst
// that callers pass (base, which must be what they pass: it is the quota
// in force when no override is stored yet). In the same atomic step it
// refills the bucket at the quota in force until now, caps it at o.Burst
// and restarts its refill clock, so that later refills run at o.Rate: the
// change neither refills for free nor loses tokens below the new burst.
// It returns the bucket's tokens after the change.
func (c *Client) SetOverride(ctx context.Context, tenant string, base Limits, o Override) (float64, error) {
	if err := base.Validate(); err != nil {
		return 0, err
	}
	if err := o.Validate(); err != nil {
		return 0, err
	}
	key := c.Key(tenant)
	cmd := quotaScript.run(ctx, c.s, []string{key, QuotaKey(key)}, "set",
		formatRate(base.Rate), strconv.FormatInt(base.Burst, 10),
		formatRate(o.Rate), strconv.FormatInt(o.Burst, 10),
		strconv.FormatInt(o.MinLease, 10), strconv.FormatInt(o.MaxLease, 10),
		strconv.FormatInt(int64(o.LeaseTTL), 10), strconv.FormatInt(int64(o.Mode), 10))
	tokens, err := parseLevel("set quota", cmd)
	if err != nil {
		return 0, err
	}
	if err := c.bumpQuotaVersion(ctx); err != nil {
		return tokens, err
	}
	return tokens, nil
}

// DeleteOverride removes tenant's quota override, so that the scripts apply
// base (what callers pass) again, with the same care for the bucket as
// SetOverride. Deleting a missing override only caps the bucket at base.
func (c *Client) DeleteOverride(ctx context.Context, tenant string, base Limits) (float64, error) {
	if err := base.Validate(); err != nil {
		return 0, err
	}
	key := c.Key(tenant)
	cmd := quotaScript.run(ctx, c.s, []string{key, QuotaKey(key)}, "del",
		formatRate(base.Rate), strconv.FormatInt(base.Burst, 10))
	tokens, err := parseLevel("delete quota", cmd)
	if err != nil {
		return 0, err
	}
	if err := c.bumpQuotaVersion(ctx); err != nil {
		return tokens, err
	}
	return tokens, nil
}

// parseRelease decodes release.lua's reply {"tokens", now_us, "credited"}
// to a release of amount tokens.
func parseRelease(cmd *redis.Cmd, amount int64) (Return, error) {
	v, err := cmd.Result()
	if err != nil {
		return Return{}, scriptError("release", err)
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 3 {
		return Return{}, fmt.Errorf("%w: release: want a 3-element array, got %T %v", ErrBadReply, v, v)
	}
	tokens, err := replyFloat(a[0])
	if err != nil {
		return Return{}, fmt.Errorf("%w: release: tokens: %w", ErrBadReply, err)
	}
	now, err := replyInt(a[1])
	if err != nil {
		return Return{}, fmt.Errorf("%w: release: time: %w", ErrBadReply, err)
	}
	credited, err := replyFloat(a[2])
	if err != nil {
		return Return{}, fmt.Errorf("%w: release: credited: %w", ErrBadReply, err)
	}
	if credited < 0 || credited > float64(amount) {
		return Return{}, fmt.Errorf("%w: release: credited %v of %d", ErrBadReply, credited, amount)
	}
	return Return{Credited: credited, Tokens: tokens, ServerTime: time.UnixMicro(now)}, nil
}

// parseLevel decodes quota.lua's reply to set and del: {"tokens", now_us}.
func parseLevel(op string, cmd *redis.Cmd) (float64, error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, scriptError(op, err)
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 2 {
		return 0, fmt.Errorf("%w: %s: want a 2-element array, got %T %v", ErrBadReply, op, v, v)
	}
	tokens, err := replyFloat(a[0])
	if err != nil {
		return 0, fmt.Errorf("%w: %s: tokens: %w", ErrBadReply, op, err)
	}
	if _, err := replyInt(a[1]); err != nil {
		return 0, fmt.Errorf("%w: %s: time: %w", ErrBadReply, op, err)
	}
	return tokens, nil
}

// replyInt accepts an integer reply, or a string holding a decimal integer
// (what a script returns if it formats its numbers).
func replyInt(v interface{}) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("got %T %v, want an integer", v, v)
}

// replyFloat accepts a string holding a finite decimal number, or an integer
// reply.
func replyFloat(v interface{}) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("got %q, want a finite number", x)
		}
		return f, nil
	}
	return 0, fmt.Errorf("got %T %v, want a number", v, v)
}

// bumpQuotaVersion raises the quota version counter (QuotaVersionKey), so
// instances notice that a quota changed.
func (c *Client) bumpQuotaVersion(ctx context.Context) error {
	if err := c.s.Incr(ctx, QuotaVersionKey(c.prefix)).Err(); err != nil {
		return fmt.Errorf("lease: quota version: %w", err)
	}
	return nil
}

// QuotaVersion returns the quota version counter: it changes whenever a
// quota is set or deleted under the client's prefix (0 before any).
func (c *Client) QuotaVersion(ctx context.Context) (int64, error) {
	v, err := c.s.Get(ctx, QuotaVersionKey(c.prefix)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("lease: quota version: %w", err)
	}
	return v, nil
}
