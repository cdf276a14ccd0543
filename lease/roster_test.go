package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestCountInstances, on redis-server: each instance counts itself once
// however often it calls, a plain client (no WithInstance) is refused
// without a call, an instance silent for its window drops out (by Redis's
// clock), the roster expires two windows after the last count, and it is
// the only key the counts write.
func TestCountInstances(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	const short = 300 * time.Millisecond
	newClient := func(id string, window time.Duration) *Client {
		t.Helper()
		c, err := NewClient(rdb, prefix, WithInstance(id, window))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// a and b count with windows of a minute, which no stall of a loaded
	// machine outlasts; s, with a short one, only where time is the
	// subject (below).
	a, b, s := newClient("a", time.Minute), newClient("b", time.Minute), newClient("s", short)
	for i, c := range []*Client{a, b} {
		want := i + 1
		for range 3 {
			if n, err := c.CountInstances(ctx); err != nil || n != want {
				t.Fatalf("%s: CountInstances = %d, %v; want %d", c.instance, n, err, want)
			}
		}
	}
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := plain.CountInstances(ctx); !errors.Is(err, ErrBadRequest) || n != 0 {
		t.Errorf("a client without WithInstance: %d, %v; want 0 and ErrBadRequest", n, err)
	}
	key := RosterKey(prefix)
	// The roster is the only key the counts made: no tenant's key, which
	// limiters of an earlier release share, is touched.
	if keys, err := rdb.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) != 1 || keys[0] != key {
		t.Errorf("keys under the prefix after the counts: %q, %v; want only %q", keys, err, key)
	}
	if pttl, err := rdb.PTTL(ctx, key).Result(); err != nil || pttl <= time.Minute || pttl > 2*time.Minute {
		t.Errorf("roster PTTL %v, %v after a count with a window of a minute; want in (1m, 2m]", pttl, err)
	}
	// A shorter window does not shorten the key's life.
	defer func() {
		if pttl, err := rdb.PTTL(ctx, key).Result(); err != nil || pttl <= time.Minute {
			t.Errorf("roster PTTL %v, %v after a count with a 300 ms window; want b's two minutes kept", pttl, err)
		}
	}()
	// Each entry lives for its own instance's window: the others' minutes
	// outlive s's 300 ms, so s's count keeps them, and s, silent, drops
	// out of b's count once its 300 ms have passed.
	if n, err := s.CountInstances(ctx); err != nil || n != 3 {
		t.Fatalf("s: %d, %v; want 3", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.CountInstances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if n != 3 || time.Now().After(deadline) {
			t.Fatalf("b's count %d; want 3, then 2 once s's 300 ms window has passed since its last count", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRosterScriptRefusesBadArguments: the script refuses an empty id or
// a window that is not a whole number of ms >= 1, and writes nothing.
func TestRosterScriptRefusesBadArguments(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	key := RosterKey(redisserver.Prefix(t))
	for _, args := range [][]interface{}{{"", "1000"}, {"a", "0"}, {"a", "-5"}, {"a", "1.5"}, {"a", "soon"}, {"a", "1e300"}} {
		err := rosterScript.run(ctx, rdb, []string{key}, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "roster:") {
			t.Errorf("roster.lua %q: %v, want a roster: error", args, err)
		}
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("after refused calls the roster exists (%d, %v)", n, err)
	}
}

// TestCountInstancesOnAKeyOfAnotherType: a key of another type at
// RosterKey is refused with ErrNoRoster and left as it was.
func TestCountInstancesOnAKeyOfAnotherType(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	key := RosterKey(prefix)
	if err := rdb.Set(ctx, key, "someone else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(rdb, prefix, WithInstance("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.CountInstances(ctx); !errors.Is(err, ErrNoRoster) || n != 0 {
		t.Fatalf("CountInstances over a string: %d, %v; want 0 and ErrNoRoster", n, err)
	}
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "someone else's" {
		t.Fatalf("the string at the roster's key is now %q, %v", v, err)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl != -1 {
		t.Fatalf("the string at the roster's key has PTTL %v, %v; want none set", ttl, err)
	}
}

// TestLeaveRoster, on redis-server: an instance that leaves is counted no
// more at once, its entry the only one removed; leaving without an entry
// is no error; a plain client is refused without a call; the script
// refuses an empty id and writes nothing; a key of another type is
// refused with ErrNoRoster and left as it was.
func TestLeaveRoster(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	key := RosterKey(prefix)
	newClient := func(id string) *Client {
		t.Helper()
		c, err := NewClient(rdb, prefix, WithInstance(id, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := newClient("a"), newClient("b")
	for _, c := range []*Client{a, b} {
		if _, err := c.CountInstances(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.LeaveRoster(ctx); err != nil {
		t.Fatalf("a leaves: %v", err)
	}
	if ids, err := rdb.ZRange(ctx, key, 0, -1).Result(); err != nil || len(ids) != 1 || ids[0] != "b" {
		t.Fatalf("roster after a left: %q, %v; want only b", ids, err)
	}
	if n, err := b.CountInstances(ctx); err != nil || n != 1 {
		t.Fatalf("b after a left: %d, %v; want 1", n, err)
	}
	if err := a.LeaveRoster(ctx); err != nil {
		t.Fatalf("a leaves again, without an entry: %v", err)
	}
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.LeaveRoster(ctx); !errors.Is(err, ErrBadRequest) {
		t.Errorf("a client without WithInstance leaves: %v; want ErrBadRequest", err)
	}
	if err := leaveScript.run(ctx, rdb, []string{key}, "").Err(); err == nil || !strings.Contains(err.Error(), "roster:") {
		t.Errorf("leave.lua with an empty id: %v, want a roster: error", err)
	}
	if ids, err := rdb.ZRange(ctx, key, 0, -1).Result(); err != nil || len(ids) != 1 || ids[0] != "b" {
		t.Fatalf("roster after the refused leaves: %q, %v; want only b", ids, err)
	}
	other := RosterKey(prefix + "other:")
	if err := rdb.Set(ctx, other, "someone else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(rdb, prefix+"other:", WithInstance("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LeaveRoster(ctx); !errors.Is(err, ErrNoRoster) {
		t.Fatalf("LeaveRoster over a string: %v; want ErrNoRoster", err)
	}
	if v, err := rdb.Get(ctx, other).Result(); err != nil || v != "someone else's" {
		t.Fatalf("the string at the roster's key is now %q, %v", v, err)
	}
}

// TestRosterRefusedByACLInsideTheScript, on a redis-server of its own: an
// ACL that lets the user run the scripts on the roster's key but not a
// command the roster's scripts call (ZCARD, ZREM: the tenants' scripts
// use neither, so an ACL written for an earlier release's commands lacks
// them) refuses the roster for good, as NOPERM does. Redis does not say
// NOPERM then: the script's call fails with "ERR The user executing the
// script can't run this command or subcommand" (7.0) or "ERR ACL failure
// in script: ..." (7.2 on).
func TestRosterRefusedByACLInsideTheScript(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartServer(t)
	admin := srv.Client()
	defer admin.Close()
	const user, pass = "limiter", "limiter-pass"
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+pass, "~*", "+@all", "-zcard", "-zrem").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pass})
	defer rdb.Close()
	c, err := NewClient(rdb, redisserver.Prefix(t), WithInstance("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.CountInstances(ctx); !errors.Is(err, ErrNoRoster) || n != 0 {
		t.Errorf("CountInstances without ZCARD in the ACL: %d, %v; want 0 and ErrNoRoster", n, err)
	}
	if err := c.LeaveRoster(ctx); !errors.Is(err, ErrNoRoster) {
		t.Errorf("LeaveRoster without ZREM in the ACL: %v; want ErrNoRoster", err)
	}
}

// TestRosterRefusedWritesNothing, on a redis-server of its own: an ACL
// that refuses a command roster.lua calls refuses the roster before the
// script writes. It read the key's TTL (PTTL, which the previous
// release's scripts, v10, never called: an ACL written for their
// commands refuses it) and counted the entries (ZCARD) after its ZADD,
// and a script that fails is not rolled back: each refused count left
// the caller's entry in the roster, without PTTL in a roster that nothing
// would expire.
func TestRosterRefusedWritesNothing(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartServer(t)
	admin := srv.Client()
	defer admin.Close()
	for _, refused := range []string{"pttl", "zcard"} {
		user, pass := "limiter-no-"+refused, "limiter-pass"
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+pass, "~*", "+@all", "-"+refused).Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pass})
		defer rdb.Close()
		prefix := redisserver.Prefix(t)
		c, err := NewClient(rdb, prefix, WithInstance("a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := c.CountInstances(ctx); !errors.Is(err, ErrNoRoster) || n != 0 {
			t.Errorf("CountInstances without %s in the ACL: %d, %v; want 0 and ErrNoRoster", refused, n, err)
		}
		key := RosterKey(prefix)
		if n := admin.ZCard(ctx, key).Val(); n != 0 {
			t.Errorf("without %s: the refused count left %d entries in the roster, TTL %v; want none", refused, n, admin.PTTL(ctx, key).Val())
		}
	}
}
