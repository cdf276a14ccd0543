package lease

// Acquires: a Grant and how one is asked for and read back.

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReserveAhead is how far ahead of Redis's clock a bucket's refill may be
// committed to reservations (acquire.lua's RESERVE_AHEAD). Clients of
// releases before reservations keep a bucket's key a second past what
// they think full, which covers a bucket frozen up to a second ahead: so
// reservations are safe in a fleet that still runs them. It is 10 ms
// short of that second: Redis keeps a key's expiry in milliseconds,
// counted from the millisecond of the script that set it, so such a
// client's second can end up to a millisecond before the second after
// its clock in microseconds (TestOldClientKeepsFrozenBucket).
const ReserveAhead = 990 * time.Millisecond

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
	// Reserved is the part of Granted that is a reservation (see
	// Request.Reserve): paced tokens of the bucket's future refill. Token
	// k of them (k = 1..Reserved) may be spent from Wait + k/Pace after
	// the reply arrived (in Redis time: from ServerTime + k/Pace), not
	// before; the other Granted - Reserved tokens at once. 0 when none.
	Reserved int64
	// Pace is the reservation's pace in tokens per second: > 0 when
	// Reserved > 0 (the caller's Share, at most the rate in force), else 0.
	Pace float64
	// Wait is how far ServerTime was ahead of Redis's clock when the
	// script ran (>= 0): the bucket was frozen until then by an earlier
	// reservation (or Redis's clock went back). A reservation's schedule
	// starts Wait after the reply arrives.
	Wait time.Duration
	// RateShare is the rate share the caller holds after the call
	// (Request.Share; none without WithInstance): it may spend RateShare.Rate
	// tokens a second of it from From until Until, in Redis's clock, on
	// top of Granted.
	RateShare RateShare
}

// Immediate returns the tokens g granted at once: Granted less Reserved.
func (g Grant) Immediate() int64 { return g.Granted - g.Reserved }

// ReservedAt returns how long after the reply arrived token k (1..Reserved)
// of g's reservation may be spent: Wait + k/Pace, rounded up to the
// microsecond. It returns 0 for k < 1 and math.MaxInt64 for k > Reserved.
func (g Grant) ReservedAt(k int64) time.Duration {
	if k < 1 {
		return 0
	}
	if k > g.Reserved || !(g.Pace > 0) {
		return math.MaxInt64
	}
	us := math.Ceil(float64(k) / g.Pace * 1e6)
	if !(us < float64((math.MaxInt64-g.Wait)/time.Microsecond)) {
		return math.MaxInt64
	}
	return g.Wait + time.Duration(us)*time.Microsecond
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

// Request is one tenant's acquire in AcquireMany.
type Request struct {
	Tenant string
	Limits Limits
	Want   int64 // >= 0
	// Demand is the caller's estimate of its demand for the tenant, in
	// tokens per second, recorded in the instance registry (WithInstance)
	// so that each instance learns its max-min fair share (Grant.Share).
	Demand float64
	// Reserve is the length of a reservation, 0 for none. When the caller
	// has a fair share (WithInstance, Grant.Share > 0) and the bucket
	// cannot serve Want now, or the credit rule holds the caller to its
	// share while its demand is above it, the acquire also reserves the
	// caller's share of the bucket's refill over Reserve:
	// min(Share, rate)*Reserve tokens (fewer when the refill is committed
	// ReserveAhead ahead already), paced at min(Share, rate)
	// (Grant.Reserved, Grant.Pace); none while a rate share is in force. It is sent in whole milliseconds,
	// rounded up. Without WithInstance it has no effect and is not sent.
	Reserve time.Duration
	// Share is what the acquire does with the caller's rate share: kept
	// (ShareKeep, the zero value), asked for on ShareTerms (ShareAsk), or
	// ended if it was granted at ShareFrom (ShareEnd). Without
	// WithInstance it has no effect and is not sent.
	Share      ShareOp
	ShareTerms ShareTerms
	ShareFrom  time.Time
}

// Validate reports whether r can be sent: valid Limits, Want >= 0,
// Reserve >= 0, a known Share and, with ShareAsk, valid ShareTerms. Errors wrap ErrBadRequest and name the field. Every Store
// checks it before touching a bucket, so an invalid request changes
// nothing.
func (r Request) Validate() error {
	if err := r.Limits.Validate(); err != nil {
		return err
	}
	if r.Want < 0 {
		return fmt.Errorf("%w: want %d: must be >= 0", ErrBadRequest, r.Want)
	}
	if r.Reserve < 0 {
		return fmt.Errorf("%w: Reserve %v: must be >= 0", ErrBadRequest, r.Reserve)
	}
	switch r.Share {
	case ShareKeep:
	case ShareAsk:
		return r.ShareTerms.Validate()
	case ShareEnd:
		if r.ShareFrom.UnixMicro() < 0 {
			return fmt.Errorf("%w: ShareFrom %v: before 1970", ErrBadRequest, r.ShareFrom)
		}
	default:
		return fmt.Errorf("%w: Share %d: not a ShareOp", ErrBadRequest, r.Share)
	}
	return nil
}

// Result is the outcome of one Request: a Grant, or the error of that
// request alone.
type Result struct {
	Grant Grant
	Err   error
}

// Acquire takes up to want tokens from tenant's global bucket, after
// refilling it from the Redis clock. It grants min(want, whole tokens in the
// bucket): a partial or zero grant is not an error. want 0 only refills and
// reports the bucket. Invalid arguments fail with an error wrapping
// ErrBadRequest, without calling Redis.
func (c *Client) Acquire(ctx context.Context, tenant string, lim Limits, want int64) (Grant, error) {
	cl, err := c.acquireCall(Request{Tenant: tenant, Limits: lim, Want: want})
	if err != nil {
		return Grant{}, err
	}
	cmd := acquireScript.run(ctx, c.s, cl.keys, cl.argv()...)
	return parseGrant(cmd, want)
}

// AcquireMany acquires for many tenants in one pipelined round trip (per
// Redis node on a cluster: go-redis splits the pipeline by node), plus one
// more only if some node had lost the script. Each request behaves like
// Acquire; results[i] is the outcome of reqs[i]. With WithBatch(n), the
// pipeline holds a script call per n valid requests instead of one per
// request.
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
	sent := make([]int, 0, len(reqs)) // the indexes in reqs of the valid requests
	for i := range reqs {
		results[i] = Result{}
		if err := reqs[i].Validate(); err != nil {
			results[i].Err = err
			continue
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return results, nil
	}
	cmds := acquireScript.runMany(ctx, c.s, c.acquireCalls(reqs, sent))
	for k, cmd := range cmds {
		lo := k * c.batch
		group := sent[lo:min(lo+c.batch, len(sent))]
		if len(group) == 1 {
			i := group[0]
			results[i].Grant, results[i].Err = parseGrant(cmd, reqs[i].Want)
			continue
		}
		parseBatch(cmd, reqs, group, results)
	}
	return results, commonFailure(cmds)
}

// acquireCalls returns the script calls of the valid requests reqs[i],
// i in sent: one per c.batch of them (WithBatch; acquire.lua's batch form
// when there is more than one), in order. They are laid out by one
// encoder.
func (c *Client) acquireCalls(reqs []Request, sent []int) []call {
	ncalls := (len(sent) + c.batch - 1) / c.batch
	nargs, text := 0, 0
	for k := range ncalls {
		lo := k * c.batch
		hi := min(lo+c.batch, len(sent))
		nargs += (hi - lo) * c.acquireArgc(reqs[sent[lo]], hi-lo)
	}
	for _, i := range sent {
		text += 2*keyLen(c.prefix, reqs[i].Tenant) + len(instancesSuffix) + len(quotaSuffix) + numbersLen
	}
	e := newEncoder(3*len(sent), 3*ncalls+3*len(sent)+nargs, text)
	calls := make([]call, ncalls)
	for k := range calls {
		lo := k * c.batch
		hi := min(lo+c.batch, len(sent))
		argc := c.acquireArgc(reqs[sent[lo]], hi-lo)
		cl := e.call(3*(hi-lo), argc*(hi-lo))
		argv := cl.argv()
		for j := range hi - lo {
			c.encodeAcquire(e, &reqs[sent[lo+j]], cl.keys[3*j:3*j+3], argv[argc*j:argc*(j+1)])
		}
		calls[k] = cl
	}
	return calls
}

// acquireArgc returns the number of arguments a tenant has in a call of
// n tenants: in a call of its own (n = 1, r the tenant's request) 3
// without a registry, 6 with one, 7 with one and a reservation length, 8
// with one and a share operation; in a batch (n > 1) every tenant has
// eight.
func (c *Client) acquireArgc(r Request, n int) int {
	switch {
	case n > 1:
		return 8
	case c.instance == "":
		return 3
	case r.Share != ShareKeep:
		return 8
	case r.Reserve > 0:
		return 7
	}
	return 6
}

// encodeAcquire sets keys (3) and args to r's keys and arguments. Past
// the arguments r has, args (a batch's eight) are "": an empty id for
// one without a registry, an empty length and share operation for none.
func (c *Client) encodeAcquire(e *encoder, r *Request, keys []string, args []interface{}) {
	e.tenantKeys(keys, c.prefix, r.Tenant, instancesSuffix)
	args[0], args[1], args[2] = e.float(&e.rate, r.Limits.Rate), e.int(&e.burst, r.Limits.Burst), e.int(&e.want, r.Want)
	n := 3
	if c.instance != "" {
		demand := r.Demand
		if !(demand >= 0) || math.IsInf(demand, 0) {
			demand = 0
		}
		args[3], args[4], args[5] = c.registry[0], c.registry[1], e.float(&e.demand, demand)
		n = 6
		if r.Reserve > 0 {
			args[6] = e.int(nil, ceilMillis(r.Reserve))
			n = 7
		}
		if r.Share != ShareKeep {
			if n == 6 {
				args[6] = ""
			}
			args[7] = shareArg(r)
			n = 8
		}
	}
	for k := n; k < len(args); k++ {
		args[k] = ""
	}
}

// shareArg returns acquire.lua's share operation for r's Share (not
// ShareKeep): "A<period>:<phase>:<hold>:<headroom>", with
// ":<instances>" after it when ShareTerms.Instances is above 1, or
// "R<from>".
func shareArg(r *Request) string {
	if r.Share == ShareEnd {
		return "R" + strconv.FormatInt(r.ShareFrom.UnixMicro(), 10)
	}
	t := r.ShareTerms
	op := fmt.Sprintf("A%d:%d:%d:%s", t.Period.Microseconds(), t.Phase.Microseconds(), t.Hold.Microseconds(), formatRate(t.Headroom))
	if t.Instances > 1 {
		op += ":" + strconv.Itoa(t.Instances)
	}
	return op
}

// acquireCall validates r and returns the keys and arguments of its
// acquire: 3 of them without a registry, 6 with one, 7 with one and a
// reservation length.
func (c *Client) acquireCall(r Request) (call, error) {
	if err := r.Validate(); err != nil {
		return call{}, err
	}
	return c.acquireCalls([]Request{r}, []int{0})[0], nil
}

// parseBatch sets the results of the tenants reqs[i], i in group, from
// their elements of cmd's reply: acquire.lua's batch form.
func parseBatch(cmd *redis.Cmd, reqs []Request, group []int, results []Result) {
	v, err := cmd.Result()
	a, ok := v.([]interface{})
	if err == nil && (!ok || len(a) != len(group)) {
		err = fmt.Errorf("%w: acquire: want a batch of %d replies, got %T %v", ErrBadReply, len(group), v, v)
	}
	for j, i := range group {
		if err != nil {
			results[i].Err = scriptError("acquire", err)
			continue
		}
		if e, isErr := a[j].(error); isErr {
			results[i].Err = scriptError("acquire", e)
			continue
		}
		results[i].Grant, results[i].Err = ParseAcquireReply(a[j], reqs[i].Want)
	}
}

// parseGrant decodes acquire.lua's reply {granted, "tokens", now_us}.
func parseGrant(cmd *redis.Cmd, want int64) (Grant, error) {
	v, err := cmd.Result()
	if err != nil {
		return Grant{}, scriptError("acquire", err)
	}
	return ParseAcquireReply(v, want)
}

// ParseAcquireReply decodes one tenant's reply of the acquire script, as
// go-redis gives it (redis.Cmd.Val: the whole reply of a call for one
// tenant, or its element of a batch's), to an acquire of want tokens. It
// is one string of nine fields separated by single spaces, "granted
// tokens now instances share reserved pace wait rateshare", and six more,
// "r b min max ttl mode", when an override is stored; a field that is
// none is empty (acquire.lua's header). Errors wrap ErrBadReply. It is
// for tools that watch the scripts' traffic (a go-redis hook, a trace);
// Client reads its replies with it. Read with cutFields and strconv, it
// allocates nothing but an override.
func ParseAcquireReply(v interface{}, want int64) (Grant, error) {
	s, ok := v.(string)
	if !ok {
		return Grant{}, fmt.Errorf("%w: acquire: want a string of 9 or 15 fields, got %T %v", ErrBadReply, v, v)
	}
	var f [grantFields + overrideValues]string
	n := cutFields(s, " ", f[:])
	if n != grantFields && n != len(f) {
		return Grant{}, fmt.Errorf("%w: acquire: %q: want %d or %d fields", ErrBadReply, s, grantFields, len(f))
	}
	// bad reports field's value v, which did not parse (err) or is out
	// of range (err nil: there is no error to wrap, and the value says
	// what is wrong).
	bad := func(field, v string, err error) error {
		if err == nil {
			return fmt.Errorf("%w: acquire: %s %s out of range in %q", ErrBadReply, field, v, s)
		}
		return fmt.Errorf("%w: acquire: %s in %q: %w", ErrBadReply, field, s, err)
	}
	granted, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return Grant{}, bad("granted", f[0], err)
	}
	tokens, err := parseFinite(f[1])
	if err != nil {
		return Grant{}, bad("tokens", f[1], err)
	}
	now, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return Grant{}, bad("time", f[2], err)
	}
	instances, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || instances < 0 || instances > math.MaxInt32 {
		return Grant{}, bad("instances", f[3], err)
	}
	if granted < 0 {
		return Grant{}, fmt.Errorf("%w: acquire: granted %d of %d", ErrBadReply, granted, want)
	}
	g := Grant{Granted: granted, Tokens: tokens, ServerTime: time.UnixMicro(now), Instances: int(instances)}
	if f[4] != "" {
		if g.Share, err = parseFinite(f[4]); err != nil || g.Share < 0 {
			return Grant{}, bad("share", f[4], err)
		}
	}
	if g.Reserved, err = strconv.ParseInt(f[5], 10, 64); err != nil || g.Reserved < 0 || g.Reserved > granted {
		return Grant{}, bad("reserved", f[5], err)
	}
	// At most want at once; a reservation (the caller's share over its
	// length) may come on top.
	if granted-g.Reserved > want {
		return Grant{}, fmt.Errorf("%w: acquire: granted %d at once of %d", ErrBadReply, granted-g.Reserved, want)
	}
	if g.Reserved > 0 {
		if g.Pace, err = parseFinite(f[6]); err != nil || !(g.Pace > 0) {
			return Grant{}, bad("pace", f[6], err)
		}
	}
	wait, err := strconv.ParseInt(f[7], 10, 64)
	if err != nil || wait < 0 || wait > int64(math.MaxInt64/time.Microsecond) {
		return Grant{}, bad("wait", f[7], err)
	}
	g.Wait = time.Duration(wait) * time.Microsecond
	if g.RateShare, err = parseRateShare(f[8]); err != nil {
		return Grant{}, bad("rate share", f[8], err)
	}
	if n > grantFields {
		var a [overrideValues]interface{}
		for i := range a {
			a[i] = f[grantFields+i]
		}
		if g.Override, err = overrideOf(a[:]); err != nil {
			return Grant{}, bad("override", "", err)
		}
	}
	return g, nil
}

// The fields of acquire.lua's reply: grantFields always, and
// overrideValues more when an override is stored.
const (
	grantFields    = 9
	overrideValues = 6
)
