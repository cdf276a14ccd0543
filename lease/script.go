package lease

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

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
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Pipeline() redis.Pipeliner
}

// Compile-time checks that the go-redis clients satisfy Scripter.
var (
	_ Scripter = (*redis.Client)(nil)
	_ Scripter = (*redis.ClusterClient)(nil)
	_ Scripter = (*redis.Ring)(nil)
	_ Scripter = redis.UniversalClient(nil)
)

var (
	//go:embed acquire.lua
	acquireSource string
	//go:embed release.lua
	releaseSource string
)

// The scripts with their digests, computed once. These are the package's
// only package-level values besides errors and constants, and never change.
var (
	acquireScript = newScript(acquireSource)
	releaseScript = newScript(releaseSource)
)

// script is a Lua script and its SHA-1 digest, the name EVALSHA knows it by.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
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
	if isNoScript(cmd.Err()) {
		cmd = c.Eval(ctx, s.src, keys, args...)
	}
	return cmd
}

// call is one script invocation in a batch.
type call struct {
	keys []string // all in one hash slot: the tenant's
	args []interface{}
}

// runMany runs the script once per call in one pipeline of EVALSHA, then
// re-runs only the calls that failed with NOSCRIPT, with EVAL, in a second
// pipeline. The second round trip happens only after the script cache was
// lost, and then once per affected node. cmds[i] is the final command of
// calls[i]; its Err is that call's error. The pipelines' own errors are not
// returned: go-redis sets each command's error, which is what matters.
func (s *script) runMany(ctx context.Context, c Scripter, calls []call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 0 {
		return cmds
	}
	pipe := c.Pipeline()
	for i := range calls {
		cmds[i] = pipe.EvalSha(ctx, s.sha, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)

	var retry redis.Pipeliner
	for i, cmd := range cmds {
		if !isNoScript(cmd.Err()) {
			continue
		}
		if retry == nil {
			retry = c.Pipeline()
		}
		cmds[i] = retry.Eval(ctx, s.src, calls[i].keys, calls[i].args...)
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	return cmds
}
