package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// nilScriptReplies is a go-redis hook that makes every script call's
// reply a nil one, as go-redis reads a nil bulk string or array
// (redis.Nil), after Redis ran it: a proxy that mangles replies, or
// another script under the digest.
type nilScriptReplies struct{}

func (nilScriptReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (nilScriptReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if nilReply(cmd) {
			return redis.Nil // what go-redis returns for a nil reply
		}
		return err
	}
}

func (nilScriptReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			nilReply(cmd)
		}
		return err
	}
}

// nilReply makes cmd's reply nil, when it is a script call Redis
// answered, and reports whether it did.
func nilReply(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok || cmd.Err() != nil || cmd.Name() != "evalsha" && cmd.Name() != "eval" {
		return false
	}
	c.SetVal(nil)
	c.SetErr(redis.Nil)
	return true
}

// TestNilScriptReplyIsBadReply: a script call answered with a nil reply
// (no script of lease's returns one) fails with an error wrapping
// ErrBadReply, as every other reply of an unexpected shape does, in a
// call for one tenant, a pipeline, a batch and a release. Before, it was
// "lease: acquire: redis: nil", which wrapped neither ErrBadReply nor
// anything but go-redis's Nil.
func TestNilScriptReplyIsBadReply(t *testing.T) {
	srv := redisserver.Shared(t)
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(nilScriptReplies{})
	prefix := redisserver.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lim := Limits{Rate: 1, Burst: 10}
	for _, batch := range []int{1, 2} {
		c, err := NewClient(rdb, prefix, WithBatch(batch))
		if err != nil {
			t.Fatal(err)
		}
		if g, err := c.Acquire(ctx, "one", lim, 1); !errors.Is(err, ErrBadReply) {
			t.Errorf("batch %d: Acquire: %+v, %v: want ErrBadReply", batch, g, err)
		}
		res, err := c.AcquireMany(ctx, []Request{{Tenant: "a", Limits: lim, Want: 1}, {Tenant: "b", Limits: lim, Want: 1}}, nil)
		if err != nil {
			t.Errorf("batch %d: AcquireMany: %v, want no common failure (Redis answered)", batch, err)
		}
		for i, r := range res {
			if !errors.Is(r.Err, ErrBadReply) {
				t.Errorf("batch %d: AcquireMany result %d: %+v: want ErrBadReply", batch, i, r)
			}
		}
	}
	c, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Release(ctx, "one", lim, 1, time.Second); !errors.Is(err, ErrBadReply) {
		t.Errorf("Release: %+v, %v: want ErrBadReply", r, err)
	}
	for i, r := range c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: "a", Limits: lim, Amount: 1, Age: time.Second}}) {
		if !errors.Is(r.Err, ErrBadReply) {
			t.Errorf("ReleaseMany result %d: %+v: want ErrBadReply", i, r)
		}
	}
}
