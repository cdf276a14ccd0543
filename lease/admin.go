package lease

// Quota overrides set and deleted by a caller that does not know the quota
// the services pass: the operator's command (cmd/leasequota).

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// AdminResult is what AdminSetOverride or AdminDeleteOverride did.
type AdminResult struct {
	// Tokens is the bucket's level after the change, when Stored.
	Tokens float64
	// Stored is false when the bucket was left as it was: missing (for
	// a set without a previous override: the next acquire creates it full
	// at the new burst), or untouched (a delete that found no override).
	Stored bool
	// Had reports whether an override was stored before the call.
	Had bool
}

// AdminSetOverride stores o as tenant's quota override, as SetOverride
// does, for a caller that does not know the quota the services pass (an
// operator's command, which has no Limiter and no configuration of the
// services). It runs admin.lua in one atomic step: when an override was
// stored, the bucket is refilled at its rate up to now and capped at its
// burst, as SetOverride would; when none was, the services' rate is not
// known, so the bucket is not refilled since its last write, only capped
// at o.Burst (the change may thus take from the tenant what the bucket
// refilled since its last lease call, never give it more), and a missing
// bucket is left missing (the next acquire creates it full at o.Burst).
// Then the bucket refills at o.Rate. The level history restarts as with
// SetOverride, the tenant's name is stored for ListOverrides, and the
// quota version is raised. o is validated as SetOverride validates it:
// errors wrap ErrBadRequest, and nothing is written.
func (c *Client) AdminSetOverride(ctx context.Context, tenant string, o Override) (AdminResult, error) {
	if err := o.Validate(); err != nil {
		return AdminResult{}, err
	}
	key := c.Key(tenant)
	cmd := adminScript.run(ctx, c.s, []string{key, QuotaKey(key)}, "set",
		formatRate(o.Rate), strconv.FormatInt(o.Burst, 10),
		strconv.FormatInt(o.MinLease, 10), strconv.FormatInt(o.MaxLease, 10),
		strconv.FormatInt(int64(o.LeaseTTL), 10), strconv.FormatInt(int64(o.Mode), 10), tenant)
	res, err := parseAdmin("set quota", cmd)
	if err != nil {
		return res, err
	}
	return res, c.bumpQuotaVersion(ctx)
}

// AdminDeleteOverride removes tenant's quota override, as DeleteOverride
// does, without the quota the services pass (see AdminSetOverride). In one
// atomic step (admin.lua) it refills the bucket at the override's rate up
// to now, capped at the override's burst (a missing bucket is full at
// it), stores it at that level with its level history restarted, and
// keeps the key without expiry: the services' next acquire refills it from
// now at their own rate, caps it at their burst and sets its TTL. The
// bucket is never refilled at a rate that was not in force. Deleting when
// no override is stored changes nothing (Had is false) and does not raise
// the quota version. A bucket left without expiry this way stays until a
// service acquires for the tenant again.
func (c *Client) AdminDeleteOverride(ctx context.Context, tenant string) (AdminResult, error) {
	key := c.Key(tenant)
	cmd := adminScript.run(ctx, c.s, []string{key, QuotaKey(key)}, "del")
	res, err := parseAdmin("delete quota", cmd)
	if err != nil || !res.Had {
		return res, err
	}
	return res, c.bumpQuotaVersion(ctx)
}

// parseAdmin decodes admin.lua's reply: {tokens or "", now, had}.
func parseAdmin(op string, cmd *redis.Cmd) (AdminResult, error) {
	v, err := cmd.Result()
	if err != nil {
		return AdminResult{}, scriptError(op, err)
	}
	a, ok := v.([]interface{})
	if !ok || len(a) != 3 {
		return AdminResult{}, fmt.Errorf("%w: %s: want a 3-element array, got %T %v", ErrBadReply, op, v, v)
	}
	var res AdminResult
	if s, ok := a[0].(string); !ok || s != "" {
		if res.Tokens, err = replyFloat(a[0]); err != nil {
			return AdminResult{}, fmt.Errorf("%w: %s: tokens: %w", ErrBadReply, op, err)
		}
		res.Stored = true
	}
	if _, err := replyInt(a[1]); err != nil {
		return AdminResult{}, fmt.Errorf("%w: %s: time: %w", ErrBadReply, op, err)
	}
	had, err := replyInt(a[2])
	if err != nil {
		return AdminResult{}, fmt.Errorf("%w: %s: had: %w", ErrBadReply, op, err)
	}
	res.Had = had == 1
	return res, nil
}
