package lease

// Releases: giving unused tokens back, credited as aged returns.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// ReleaseRequest is one tenant's release in ReleaseMany.
type ReleaseRequest struct {
	Tenant string
	Limits Limits
	Amount int64         // >= 0; 0 is not sent
	Age    time.Duration // >= 0; see Release
	// Grant is the ID of the oldest grant the returned tokens come from
	// (Grant.ID), or zero for unknown. With it, the credit counts only the
	// bucket's levels after that grant's debit; without it, the levels
	// since Redis's clock less Age (see Release). With it, Age need only be below about
	// 71 minutes (2^32 µs, less how far the bucket's time runs ahead of
	// Redis's clock, at most ReserveAhead), to tell which time the ID's low bits are: a
	// release that reaches Redis later than Age allows is still judged
	// from its grant. For the tokens of one
	// grant that is exact, unless the bucket's history merged entries
	// around it; for tokens of several grants, the later grants' own levels
	// before their debits count too, which only credits less.
	Grant GrantID
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

// ReleaseResult is the outcome of one ReleaseRequest: a Return, or the
// error of that request alone.
type ReleaseResult struct {
	Return Return
	Err    error
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
// doc). Release knows the grant only as Redis's clock less age (the age is
// measured against that clock, not against a bucket's time, which runs
// ahead of it while its refill is reserved), so P also counts the
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
	r := ReleaseRequest{Tenant: tenant, Limits: lim, Amount: amount, Age: age}
	if err := r.Validate(); err != nil {
		return Return{}, err
	}
	if amount == 0 {
		return Return{}, nil
	}
	cl := c.releaseCall(r)
	cmd := releaseScript.run(ctx, c.s, cl.keys, cl.argv()...)
	return parseRelease(cmd, amount)
}

// ReleaseMany releases for many tenants in one pipelined round trip, like
// AcquireMany; each request behaves like Release. It returns one result
// per request (so len is len(reqs)); a request with Amount 0 is not sent
// and gets a zero Return and a nil Err. Invalid requests get an error
// wrapping ErrBadRequest and are not sent. The Release caveats about age
// and retries apply.
func (c *Client) ReleaseMany(ctx context.Context, reqs []ReleaseRequest) []ReleaseResult {
	res := make([]ReleaseResult, len(reqs))
	sent := make([]int, 0, len(reqs)) // the indexes in reqs of the calls
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			res[i].Err = err
			continue
		}
		if reqs[i].Amount == 0 {
			continue
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return res
	}
	for j, cmd := range releaseScript.runMany(ctx, c.s, c.releaseCalls(reqs, sent)) {
		i := sent[j]
		res[i].Return, res[i].Err = parseRelease(cmd, reqs[i].Amount)
	}
	return res
}

// releaseCall returns the call of the valid release r.
func (c *Client) releaseCall(r ReleaseRequest) call {
	return c.releaseCalls([]ReleaseRequest{r}, []int{0})[0]
}

// releaseCalls returns the calls of the valid releases reqs[i], i in
// sent, laid out by one encoder (see acquireCalls). A release's arguments
// are its rate, burst, amount, age in milliseconds (rounded up) and the
// grant the tokens come from (0 for unknown) and, with an instance id, a
// fresh release id for deduplication and how long it is remembered.
func (c *Client) releaseCalls(reqs []ReleaseRequest, sent []int) []call {
	argc := 5
	if c.instance != "" {
		argc = 7
	}
	text := 0
	for _, i := range sent {
		text += 2*keyLen(c.prefix, reqs[i].Tenant) + len(releasesSuffix) + len(quotaSuffix) + numbersLen + len(c.instance) + 21
	}
	e := newEncoder(3*len(sent), len(sent)*(6+argc), text)
	calls := make([]call, len(sent))
	for j, i := range sent {
		r := &reqs[i]
		cl := e.call(3, argc)
		e.tenantKeys(cl.keys, c.prefix, r.Tenant, releasesSuffix)
		args := cl.argv()
		args[0], args[1], args[2] = e.float(&e.rate, r.Limits.Rate), e.int(&e.burst, r.Limits.Burst), e.int(&e.amount, r.Amount)
		args[3], args[4] = e.int(nil, ceilMillis(r.Age)), e.int(nil, int64(r.Grant))
		if c.instance != "" {
			start := e.text.Len()
			e.text.WriteString(c.instance)
			e.text.WriteByte(':')
			e.text.Write(strconv.AppendUint(e.num[:0], c.releases.Add(1), 10))
			args[5], args[6] = e.since(start), c.releaseWindow
		}
		calls[j] = cl
	}
	return calls
}

// parseRelease decodes release.lua's reply to a release of amount tokens.
func parseRelease(cmd *redis.Cmd, amount int64) (Return, error) {
	v, err := cmd.Result()
	if err != nil {
		return Return{}, scriptError("release", err)
	}
	return ParseReleaseReply(v, amount)
}

// ParseReleaseReply decodes the release script's reply v, as go-redis
// gives it (redis.Cmd.Val), to a release of amount tokens: one string,
// "tokens now credited". Errors wrap ErrBadReply. It is for tools that
// watch the scripts' traffic (a go-redis hook, a trace); Client reads its
// replies with it.
func ParseReleaseReply(v interface{}, amount int64) (Return, error) {
	s, ok := v.(string)
	if !ok {
		return Return{}, fmt.Errorf("%w: release: want a string of 3 fields, got %T %v", ErrBadReply, v, v)
	}
	var f [3]string
	if n := cutFields(s, " ", f[:]); n != len(f) {
		return Return{}, fmt.Errorf("%w: release: want 3 fields, got %q", ErrBadReply, s)
	}
	ts, ns, cs := f[0], f[1], f[2]
	tokens, err := parseFinite(ts)
	if err != nil {
		return Return{}, fmt.Errorf("%w: release: tokens in %q: %w", ErrBadReply, s, err)
	}
	now, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return Return{}, fmt.Errorf("%w: release: time in %q: %w", ErrBadReply, s, err)
	}
	credited, err := parseFinite(cs)
	if err != nil {
		return Return{}, fmt.Errorf("%w: release: credited in %q: %w", ErrBadReply, s, err)
	}
	if credited < 0 || credited > float64(amount) {
		return Return{}, fmt.Errorf("%w: release: credited %v of %d", ErrBadReply, credited, amount)
	}
	return Return{Credited: credited, Tokens: tokens, ServerTime: time.UnixMicro(now)}, nil
}
