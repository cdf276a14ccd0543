package integration

import (
	"context"
	"flag"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/lease"
)

var fleetTrace = flag.Bool("fleet.trace", false,
	"log, for each second of each BenchmarkFleet load, the tenants leasequota's acquire calls served, by what they asked for (scriptTally)")

// scriptTally counts, for each second of a fleet's load, the tenants that
// the limiters' acquire script calls served, by the call's rate share
// operation: tokens only, an ask for a share (and how many of those
// replies held one), the end of one. It is a go-redis hook on each
// limiter's client; an acquire is told from a release by its reply
// (lease.ParseAcquireReply reads the one, not the other). It counts from
// start (the load's start) until stopped (its end), so that Close's ends
// stay out.
type scriptTally struct {
	start   atomic.Int64 // unix ns, set when the load starts
	stopped atomic.Bool
	secs    [tallySeconds]tallySecond
}

const tallySeconds = 120

type tallySecond struct{ tokens, asks, granted, ends atomic.Int64 }

func (t *scriptTally) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *scriptTally) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		t.count(cmd)
		return err
	}
}

func (t *scriptTally) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			t.count(cmd)
		}
		return err
	}
}

// count tallies an acquire call's tenants: EVALSHA or EVAL with 3 keys a
// tenant, the share operation the eighth argument of a tenant's (absent
// in a call of one tenant that keeps its share), and the rate share held
// after the call in its reply (Grant.RateShare).
func (t *scriptTally) count(cmd redis.Cmder) {
	if t.start.Load() == 0 || t.stopped.Load() || cmd.Err() != nil {
		return
	}
	args := cmd.Args()
	if len(args) < 4 {
		return
	}
	if name, _ := args[0].(string); name != "evalsha" && name != "eval" {
		return
	}
	nk, _ := args[2].(int)
	c, ok := cmd.(*redis.Cmd)
	if !ok || nk < 3 || nk%3 != 0 || len(args) < 3+nk {
		return
	}
	n, argv := nk/3, args[3+nk:]
	replies := []interface{}{c.Val()}
	if n > 1 {
		replies, _ = c.Val().([]interface{})
	}
	if len(replies) != n || len(argv)%n != 0 {
		return
	}
	per := len(argv) / n
	sec := &t.secs[min(int(time.Duration(time.Now().UnixNano()-t.start.Load())/time.Second), tallySeconds-1)]
	for j, r := range replies {
		g, err := lease.ParseAcquireReply(r, math.MaxInt64)
		if err != nil {
			return // a release, or an error reply
		}
		op := ""
		if per >= 8 {
			op = fmt.Sprint(argv[j*per+7])
		}
		switch {
		case len(op) > 0 && op[0] == 'A':
			sec.asks.Add(1)
			if g.RateShare.Held() {
				sec.granted.Add(1)
			}
		case len(op) > 0 && op[0] == 'R':
			sec.ends.Add(1)
		default:
			sec.tokens.Add(1)
		}
	}
}

// lines returns the tally, a line per second with a call.
func (t *scriptTally) lines() []string {
	var out []string
	for i := range t.secs {
		s := &t.secs[i]
		tok, asks, granted, ends := s.tokens.Load(), s.asks.Load(), s.granted.Load(), s.ends.Load()
		if tok+asks+ends == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("second %d: %d tenants served: %d for tokens only, %d asking for a rate share (%d held one after), %d ending one",
			i+1, tok+asks+ends, tok, asks, granted, ends))
	}
	return out
}
