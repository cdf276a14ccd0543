package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The fleet's roster: how many instances share a prefix, which no tenant's
// registry can tell. A tenant's registry counts the instances that lease
// it; an instance whose tenants are each on 3 of 1,000 instances sees 3
// there, yet its share of Redis is a thousandth. The syncer sizes the
// floor of its call window by the fleet (syncer's budgetFloor), and a
// floor sized by 3 instead of 1,000 alone queued more commands than a
// call's deadline allows (TestSaturatedSparseFleet).

// ErrNoRoster is wrapped by CountInstances when Redis refuses the roster
// for good: an ACL that does not allow its key, its script (NOPERM) or a
// command the script calls, or a key of another type at RosterKey
// (WRONGTYPE). Counting again would not help;
// the syncer stops counting and sizes its call window's floor by the
// tenants' registries.
var ErrNoRoster = errors.New("lease: the fleet's roster cannot be kept")

// RosterKey returns the key of the fleet's roster under prefix: a sorted
// set of the ids of the instances (WithInstance) that counted themselves
// with CountInstances, each scored by when its entry expires (its last
// count plus its window, in milliseconds of Redis's clock). It has no hash
// tag, so it cannot be any tenant's key, and it expires at least two
// windows after the last count. With the empty prefix it is the key
// "roster": give a prefix when the database holds keys of its own.
func RosterKey(prefix string) string {
	return prefix + "roster"
}

// An InstanceCounter counts the instances of a fleet. *Client and
// lease/memstore's Instance implement it; a Store that does not (one of
// an earlier release, or a test double) leaves the syncer to size the
// floor of its call window by the instances its tenants' registries
// report.
type InstanceCounter interface {
	// CountInstances records the caller in the fleet's roster for its
	// window and returns how many instances are recorded there, each for
	// its own window since its last count, the caller included.
	CountInstances(ctx context.Context) (int, error)
}

// A RosterLeaver takes its instance out of the fleet's roster when the
// instance stops, so that the others count it no more at once rather
// than a window later: a fleet restarted under new instance ids is not
// counted twice for a window. *Client and lease/memstore's Instance
// implement it. The syncer calls it at Close (ReleaseAll), after the last
// count.
type RosterLeaver interface {
	// LeaveRoster removes the caller's entry from the roster, if it has
	// one. A later CountInstances records it again.
	LeaveRoster(ctx context.Context) error
}

var (
	_ InstanceCounter = (*Client)(nil)
	_ RosterLeaver    = (*Client)(nil)
)

// CountInstances records this client's instance (WithInstance) in the
// roster at RosterKey for its window and returns how many instances have
// an entry there that has not expired, this one included: each entry
// lives for its own instance's window after its last count. One script
// call (ZCARD and PTTL of the roster, then ZADD, ZREMRANGEBYSCORE and at
// most one PEXPIRE, at Redis's TIME: the reads first, so that an ACL that
// refuses one leaves the roster as it was). It fails with an error wrapping ErrBadRequest
// for a client without WithInstance, without calling Redis, and with one
// wrapping ErrNoRoster when Redis refuses the roster for good.
//
// The count is of the instances that counted themselves: clients of
// earlier releases do not, so during a rollout it errs low; and an
// instance that stopped stays counted until its entry expires, a window
// after its last count (a process restarted under a new id is counted
// twice until then, unless it left with LeaveRoster).
func (c *Client) CountInstances(ctx context.Context) (int, error) {
	if c.instance == "" {
		return 0, fmt.Errorf("%w: CountInstances needs an instance id", ErrBadRequest)
	}
	n, err := rosterScript.run(ctx, c.s, []string{RosterKey(c.prefix)},
		c.instance, strconv.FormatInt(c.window.Milliseconds(), 10)).Int64()
	if refusedForGood(err) {
		return 0, fmt.Errorf("%w: %w", ErrNoRoster, err)
	}
	if err != nil {
		return 0, fmt.Errorf("lease: count instances: %w", err)
	}
	return int(n), nil
}

// LeaveRoster removes this client's instance (WithInstance) from the
// roster at RosterKey, if it has an entry there, so that the other
// instances count it no more: call it once the instance has stopped
// counting (the Limiter's Close does). One script call (ZREM of the
// roster). It fails with an error wrapping ErrBadRequest for a client
// without WithInstance, without calling Redis, and with one wrapping
// ErrNoRoster when Redis refuses the roster for good. An entry that
// could not be removed expires by itself, a window after its last count.
func (c *Client) LeaveRoster(ctx context.Context) error {
	if c.instance == "" {
		return fmt.Errorf("%w: LeaveRoster needs an instance id", ErrBadRequest)
	}
	err := leaveScript.run(ctx, c.s, []string{RosterKey(c.prefix)}, c.instance).Err()
	if refusedForGood(err) {
		return fmt.Errorf("%w: %w", ErrNoRoster, err)
	}
	if err != nil {
		return fmt.Errorf("lease: leave the roster: %w", err)
	}
	return nil
}

// refusedForGood reports whether err is Redis refusing the roster for
// good: an ACL that does not allow the script or its key (NOPERM), one
// that does not allow a command the script calls, or a key of another
// type (WRONGTYPE). An ACL refusal inside a script is no NOPERM: Redis
// 7.0 says "ERR The user executing the script can't run this command or
// subcommand" (or "can't access at least one of the keys"), 7.2 on "ERR
// ACL failure in script: ..." (HasErrorPrefix drops the "ERR ").
func refusedForGood(err error) bool {
	return redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "WRONGTYPE") ||
		redis.HasErrorPrefix(err, "ACL failure in script") ||
		redis.HasErrorPrefix(err, "The user executing the script can't")
}
