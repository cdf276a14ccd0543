package lease

// Quota overrides stored next to a bucket, and the quota version that
// tells instances one changed.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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
// It returns the bucket's tokens after the change. The tenant's name is
// stored with the override, for ListOverrides.
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
		strconv.FormatInt(int64(o.LeaseTTL), 10), strconv.FormatInt(int64(o.Mode), 10), tenant)
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

// parseOverride decodes an override as the scripts return it: 0 for none,
// else {r, b, min, max, ttl, mode}, the texts stored (quota.lua's get, and
// the hash as Inspect and ListOverrides read it). A text that strconv
// reads but common.lua's override_problem refuses (a sign, Go's digit
// separators, a hex float: "+5", "1_000", "0x1p4") is an error: every
// acquire of the tenant fails on such an override ("corrupt quota"), and
// read as 5, 1000 or 16 it was shown as one in force. acquire.lua's reply
// (overrideOf alone) holds only texts read_override accepted.
func parseOverride(v interface{}) (*Override, error) {
	if n, ok := v.(int64); ok && n == 0 {
		return nil, nil
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 6 {
		return nil, fmt.Errorf("want 0 or a 6-element array, got %T %v", v, v)
	}
	for i, x := range a {
		s, ok := x.(string)
		if !ok {
			continue // an integer reply: no text to judge
		}
		if i == 0 && !decimalText(s) {
			return nil, fmt.Errorf("rate: %q is not a decimal number as the scripts read one", s)
		}
		if i > 0 && !digitsText(s) {
			return nil, fmt.Errorf("field %d: %q is not digits as the scripts read them", i, s)
		}
	}
	return overrideOf(a)
}

// decimalText reports whether s is a number common.lua's decimal accepts:
// digits with at most one point and at least one digit, and an optional
// exponent (e or E, a sign, digits) after a mantissa that starts with a
// digit or a point and a digit. No sign, space, hex or digit separator.
func decimalText(s string) bool {
	mant, exp, hasExp := strings.Cut(strings.Replace(s, "E", "e", 1), "e")
	if hasExp {
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		// The mantissa's first digit is at its start or after its
		// leading point (common.lua: '^%.?%d').
		lead := strings.TrimPrefix(mant, ".")
		if !allDigits(exp) || lead == "" || !isDigit(lead[0]) {
			return false
		}
	}
	digit, point := false, false
	for i := 0; i < len(mant); i++ {
		switch c := mant[i]; {
		case isDigit(c):
			digit = true
		case c == '.' && !point:
			point = true
		default:
			return false
		}
	}
	return digit
}

// digitsText reports whether s is a whole number common.lua's digits
// accepts: ASCII digits only, at most 2^63 - 1 written in 19 of them (20
// digits with leading zeros are refused there too).
func digitsText(s string) bool {
	return allDigits(s) && (len(s) < 19 || len(s) == 19 && s <= "9223372036854775807")
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// overrideOf decodes the six values of a stored override, r, b, min, max,
// ttl and mode, as a script returns them.
func overrideOf(a []interface{}) (*Override, error) {
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

// bumpQuotaVersion raises the quota version counter (QuotaVersionKey), so
// instances notice that a quota changed.
func (c *Client) bumpQuotaVersion(ctx context.Context) error {
	if err := c.s.Incr(ctx, QuotaVersionKey(c.prefix)).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrQuotaVersion, err)
	}
	return nil
}

// ErrQuotaVersion is wrapped by SetOverride, DeleteOverride,
// AdminSetOverride and AdminDeleteOverride when the change was made (the
// override is stored, or deleted, and in force for every acquire) but the
// quota version could not be raised after it (QuotaVersionKey has no hash
// tag: it cannot be written in the change's script): limiters that poll it
// learn the change at their tenant's next lease call instead. Raising it
// again (any later change does) tells them.
var ErrQuotaVersion = errors.New("lease: the quota changed, but the quota version was not raised")

// ProbeWrite runs a write that changes nothing (a DEL of ProbeKey) and
// returns Redis's error: READONLY on a replica, NOREPLICAS short of
// min-replicas-to-write, where a read (QuotaVersion) succeeds. The
// syncer probes its circuit breaker with it after such replies
// (syncer.WriteProber).
func (c *Client) ProbeWrite(ctx context.Context) error {
	if err := probeScript.run(ctx, c.s, []string{ProbeKey(c.prefix)}).Err(); err != nil {
		return fmt.Errorf("lease: probe write: %w", err)
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
