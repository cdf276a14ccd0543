package lease

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Scripter is the part of go-redis that lease uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient all satisfy
// it. Pipelines on a cluster client are split per node by go-redis, and an
// EVALSHA is routed by its first key, so a tenant's calls go to the node
// that owns its bucket.
type Scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...interface{}) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...interface{}) *redis.Cmd
	Pipeline() redis.Pipeliner
	// Incr and Get keep the quota version counter (QuotaVersionKey).
	Incr(ctx context.Context, key string) *redis.IntCmd
	Get(ctx context.Context, key string) *redis.StringCmd
}

// Compile-time checks that the go-redis clients satisfy Scripter.
var (
	_ Scripter = (*redis.Client)(nil)
	_ Scripter = (*redis.ClusterClient)(nil)
	_ Scripter = (*redis.Ring)(nil)
	_ Scripter = redis.UniversalClient(nil)
)

var (
	// commonSource goes in front of each script: Redis scripts cannot load
	// one another, and the three read buckets, overrides and the level
	// history the same way.
	//go:embed common.lua
	commonSource string
	//go:embed acquire.lua
	acquireSource string
	//go:embed release.lua
	releaseSource string
	//go:embed quota.lua
	quotaSource string
	// admin.lua, for callers without the services' quota (AdminSetOverride),
	// and inspect.lua, which only reads (Inspect, ReadBuckets).
	//go:embed admin.lua
	adminSource string
	//go:embed inspect.lua
	inspectSource string
	// roster.lua keeps the fleet's roster (CountInstances), and leave.lua
	// takes an instance out of it (LeaveRoster).
	//go:embed roster.lua
	rosterSource string
	//go:embed leave.lua
	leaveSource string
	// probe.lua is a write that changes nothing (ProbeWrite).
	//go:embed probe.lua
	probeSource string
)

// The scripts with their digests, computed once. These are the package's
// only package-level values besides errors and constants, and never change.
var (
	acquireScript = newScript(commonSource + acquireSource)
	releaseScript = newScript(commonSource + releaseSource)
	quotaScript   = newScript(commonSource + quotaSource)
	adminScript   = newScript(commonSource + adminSource)
	inspectScript = newScript(inspectSource)
	rosterScript  = newScript(rosterSource)
	leaveScript   = newScript(leaveSource)
	probeScript   = newScript(probeSource)
)

// script is a Lua script and its SHA-1 digest, the name EVALSHA knows it by.
type script struct {
	src string
	sha string
	// shaArg and srcArg are sha and src boxed once: a pipeline's commands
	// carry one of them each, and boxing a string allocates.
	shaArg, srcArg interface{}
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &script{src: src, sha: sha, shaArg: sha, srcArg: src}
}

// isNoScript reports whether err is Redis saying it does not have the
// script (never loaded, SCRIPT FLUSH, restart, failover to a node that never
// saw it). The script did not run then, so running it again is safe; no
// other error is retried, because acquire and release are not idempotent.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// run runs the script on one key: EVALSHA, and EVAL (which also caches the
// script on that node) when the node does not know the digest.
func (s *script) run(ctx context.Context, c Scripter, keys []string, args ...interface{}) *redis.Cmd {
	cmd := c.EvalSha(ctx, s.sha, keys, args...)
	for attempt := 0; ; attempt++ {
		switch {
		case isNoScript(cmd.Err()):
			cmd = c.Eval(ctx, s.src, keys, args...)
			continue
		case isTryAgain(cmd.Err()) && attempt < maxTryAgain && pause(ctx, attempt):
			cmd = c.EvalSha(ctx, s.sha, keys, args...)
			continue
		}
		break
	}
	if cr, ok := c.(clusterRouter); ok && isUnreachable(cmd.Err()) {
		cr.ReloadState(ctx)
	}
	return cmd
}

// clusterRouter is what lease uses of a *redis.ClusterClient: the master
// of a key, to send one pipeline per master, and a reload of the slot map.
type clusterRouter interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

// isUnreachable reports whether err is a failure to reach Redis (refused,
// reset, timeout) rather than a reply.
func isUnreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

// isTryAgain reports whether err is Redis Cluster refusing a multi-key
// command on a slot being migrated (some of the keys are there, some not
// yet or no more). The script did not run, so running it again is safe.
func isTryAgain(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN")
}

// maxTryAgain bounds the re-sends after TRYAGAIN; a slot's migration takes
// milliseconds.
const maxTryAgain = 5

// pause sleeps before re-send attempt (2, 4, 8, ... ms), and reports false
// when ctx ends first.
func pause(ctx context.Context, attempt int) bool {
	t := time.NewTimer(time.Duration(2<<attempt) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// call is one script invocation in a pipeline.
type call struct {
	keys []string // all in one hash slot: the tenant's
	// cmd is the arguments of the command that runs the script: "evalsha",
	// the digest, len(keys) and the keys (room that runPipeline fills in),
	// then the script's arguments (argv). The command is built on it, so
	// that a pipeline's commands can share one block (see encoder).
	cmd []interface{}
}

// newCall returns the call of a script with keys and args.
func newCall(keys []string, args ...interface{}) call {
	cmd := make([]interface{}, 3+len(keys), 3+len(keys)+len(args))
	return call{keys: keys, cmd: append(cmd, args...)}
}

// argv returns the script's arguments of cl.
func (cl call) argv() []interface{} { return cl.cmd[3+len(cl.keys):] }

// fill fills in the head of cl.cmd for EVALSHA of s: the name, the
// digest, the number of keys and the keys.
func (s *script) fill(cl call) {
	cl.cmd[0], cl.cmd[1], cl.cmd[2] = "evalsha", s.shaArg, len(cl.keys)
	for k, key := range cl.keys {
		cl.cmd[3+k] = key
	}
}

// command returns the command of cl (filled): EVALSHA, or with eval EVAL
// of the source, which needs a command of its own. Like go-redis's
// EvalSha, it routes by the first key.
func (s *script) command(ctx context.Context, cl call, eval bool) *redis.Cmd {
	args := cl.cmd
	if eval {
		args = slices.Clone(args)
		args[0], args[1] = "eval", s.srcArg
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// runMany runs the script once per call in one pipeline of EVALSHA, then
// re-runs only the calls that failed with NOSCRIPT, with EVAL, in a second
// pipeline. The second round trip happens only after the script cache was
// lost, and then once per affected node. cmds[i] is the final command of
// calls[i]; its Err is that call's error. The pipelines' own errors are not
// returned: go-redis sets each command's error, which is what matters.
func (s *script) runMany(ctx context.Context, c Scripter, calls []call) []*redis.Cmd {
	cr, ok := c.(clusterRouter)
	if !ok {
		return s.runPipeline(ctx, c, calls, false)
	}
	// go-redis splits a cluster pipeline per node, but when a node cannot
	// be reached it retries that node's commands with a backoff and, when
	// the deadline passes meanwhile, sets the deadline error on every
	// command of the pipeline, replies of healthy masters included. One
	// pipeline per master keeps a dead master's failure to its tenants.
	groups := map[*redis.Client][]int{}
	for i := range calls {
		node, _ := cr.MasterForKey(ctx, calls[i].keys[0]) // nil on error: go-redis routes it
		groups[node] = append(groups[node], i)
	}
	var cmds []*redis.Cmd
	if len(groups) == 1 {
		cmds = s.runPipeline(ctx, c, calls, true)
	} else {
		cmds = make([]*redis.Cmd, len(calls))
		var wg sync.WaitGroup
		for _, idx := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sub := make([]call, len(idx))
				for j, i := range idx {
					sub[j] = calls[i]
				}
				for j, cmd := range s.runPipeline(ctx, c, sub, true) {
					cmds[idx[j]] = cmd
				}
			}()
		}
		wg.Wait()
	}
	// go-redis reloads its slot map on MOVED and on a timer (60 s); a dead
	// master sends no MOVED, so its slots would stay routed to it long
	// after its replica took over (go-redis #3979). Reload (go-redis
	// coalesces reloads) when a node could not be reached.
	for _, cmd := range cmds {
		if isUnreachable(cmd.Err()) {
			cr.ReloadState(ctx)
			break
		}
	}
	return cmds
}

// runPipeline runs the calls in one pipeline of EVALSHA; then re-sends,
// in a second pipeline, with EVAL, the calls that got NOSCRIPT; then,
// after a short pause and up to maxTryAgain times, the calls that got
// TRYAGAIN. Neither reply means the script ran.
//
// With guarded (a ClusterClient), each pipeline starts with EXISTS of
// the first call's first key, a read of one key, which never gets
// TRYAGAIN. When the first command of a node's batch gets a reply that
// go-redis retries (TRYAGAIN among them: a script of several keys on a
// migrating slot), go-redis sends the whole batch again on each of its
// redirects, scripts that ran included, and a command it had already
// redirected (MOVED, ASK) goes to two nodes at once: acquires that were
// granted ran up to four times, their buckets losing those tokens
// (TestClusterTryAgainRunsEachAcquireOnce, in the integration module).
// The batches of a call's other nodes, when its calls span several (a
// stale slot map), are not guarded; runMany sends one pipeline per
// master. Nor does the guard cover the other replies go-redis retries
// when the read gets them while the batch's scripts run: CLUSTERDOWN for
// the read's slot alone (a slot not served while the node's others are,
// as in a reshard with partial coverage, or a failover's end), LOADING,
// READONLY. Then the batch's acquires run again (four times in a helper's
// test that took the read's slot away): the bound holds, the buckets lose
// those tokens. Not fixed: the client's retries are the caller's setting
// (ClusterOptions.MaxRedirects).
//
// On one server (no guard) go-redis does the same: it sends the whole
// pipeline again, up to MaxRetries, when its first command's reply is
// one it retries (LOADING, READONLY, MASTERDOWN, NOREPLICAS, ...), which
// a pipeline can get while the commands after it run (a large pipeline
// read as Redis finishes loading, or is promoted). The calls that ran
// run again: acquires take more tokens (the bound holds); releases are
// applied once only with release ids (WithInstance, as the Limiter's
// clients have), the replay's reply then saying 0 credited
// (TestReleasePipelineReplayedByGoRedis). No pipeline mixes scripts, so a
// replayed acquire pipeline carries no release.
//
// It queues commands it builds itself (the same ones that the pipeline's
// EvalSha and Eval build) all at once: EvalSha would copy each call's
// arguments into a slice of its own, with the digest boxed again, and
// queueing one at a time grows the pipeline's slice as it goes.
func (s *script) runPipeline(ctx context.Context, c Scripter, calls []call, guarded bool) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 0 {
		return cmds
	}
	// pipeline starts a pipeline whose first command is the call's (see
	// guarded above).
	pipeline := func(first call) redis.Pipeliner {
		p := c.Pipeline()
		if guarded {
			p.Exists(ctx, first.keys[0])
		}
		return p
	}
	queued := make([]redis.Cmder, len(calls))
	for i := range calls {
		s.fill(calls[i])
		cmds[i] = s.command(ctx, calls[i], false)
		queued[i] = cmds[i]
	}
	pipe := pipeline(calls[0])
	_ = pipe.BatchProcess(ctx, queued...) // queues; a pipeline's errors come with Exec
	_, _ = pipe.Exec(ctx)

	for attempt := 0; ; attempt++ {
		var retry redis.Pipeliner
		tryAgain := false
		for i, cmd := range cmds {
			switch {
			case isNoScript(cmd.Err()):
				if retry == nil {
					retry = pipeline(calls[i])
				}
				cmds[i] = s.command(ctx, calls[i], true)
				_ = retry.Process(ctx, cmds[i])
			case isTryAgain(cmd.Err()):
				tryAgain = true
			}
		}
		if retry != nil {
			_, _ = retry.Exec(ctx)
			continue // the EVALs may have met TRYAGAIN too
		}
		if !tryAgain || attempt >= maxTryAgain || !pause(ctx, attempt) {
			return cmds
		}
		var pipe redis.Pipeliner
		for i, cmd := range cmds {
			if isTryAgain(cmd.Err()) {
				if pipe == nil {
					pipe = pipeline(calls[i])
				}
				cmds[i] = s.command(ctx, calls[i], false)
				_ = pipe.Process(ctx, cmds[i])
			}
		}
		_, _ = pipe.Exec(ctx)
	}
}
