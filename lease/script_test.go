package lease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// fakeRedisError is a Redis error reply (it has the RedisError marker
// method go-redis uses to tell replies from transport errors).
type fakeRedisError string

func (e fakeRedisError) Error() string { return string(e) }
func (e fakeRedisError) RedisError()   {}

// fakeScripter models script caches on several nodes: a key's node is its
// first byte, and a node runs EVALSHA only after it has seen an EVAL (or a
// SCRIPT LOAD) of the script. Unimplemented methods panic through the nil
// embedded interface.
type fakeScripter struct {
	Scripter
	loaded    map[byte]bool // node -> has the script
	failWith  map[byte]error
	calls     []string // "evalsha k", "eval k", in order
	pipelines [][]string
}

func newFake() *fakeScripter {
	return &fakeScripter{loaded: map[byte]bool{}, failWith: map[byte]error{}}
}

func (f *fakeScripter) exec(ctx context.Context, name, key string) *redis.Cmd {
	cmd := redis.NewCmd(ctx, name, key)
	f.calls = append(f.calls, name+" "+key)
	node := key[0]
	if err := f.failWith[node]; err != nil {
		cmd.SetErr(err)
		return cmd
	}
	switch {
	case name == "eval":
		f.loaded[node] = true
	case !f.loaded[node]:
		cmd.SetErr(redis.ErrNoScript)
		return cmd
	}
	cmd.SetVal("1 0.5 1700000000000000 0  0  0 ")
	return cmd
}

func (f *fakeScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...interface{}) *redis.Cmd {
	if sha != acquireScript.sha {
		panic("unexpected digest " + sha)
	}
	return f.exec(ctx, "evalsha", keys[0])
}

func (f *fakeScripter) Eval(ctx context.Context, src string, keys []string, args ...interface{}) *redis.Cmd {
	if src != acquireScript.src {
		panic("unexpected script")
	}
	return f.exec(ctx, "eval", keys[0])
}

func (f *fakeScripter) Pipeline() redis.Pipeliner { return &fakePipe{f: f} }

// fakePipe queues commands and runs them on Exec, like a go-redis pipeline.
type fakePipe struct {
	redis.Pipeliner
	f      *fakeScripter
	queued []func()
	names  []string
}

func (p *fakePipe) queue(ctx context.Context, name, key string) *redis.Cmd {
	cmd := redis.NewCmd(ctx, name, key)
	p.enqueue(ctx, cmd, name, key)
	return cmd
}

// enqueue queues cmd, which runs as name on key.
func (p *fakePipe) enqueue(ctx context.Context, cmd *redis.Cmd, name, key string) {
	p.names = append(p.names, name+" "+key)
	p.queued = append(p.queued, func() {
		r := p.f.exec(ctx, name, key)
		if r.Err() != nil {
			cmd.SetErr(r.Err())
		} else {
			cmd.SetVal(r.Val())
		}
	})
}

func (p *fakePipe) EvalSha(ctx context.Context, sha string, keys []string, args ...interface{}) *redis.Cmd {
	return p.queue(ctx, "evalsha", keys[0])
}

func (p *fakePipe) Eval(ctx context.Context, src string, keys []string, args ...interface{}) *redis.Cmd {
	return p.queue(ctx, "eval", keys[0])
}

// Process queues a script command built by hand, as lease does: name,
// digest or source, numkeys, keys..., args....
func (p *fakePipe) Process(ctx context.Context, c redis.Cmder) error {
	cmd := c.(*redis.Cmd)
	args := cmd.Args()
	name, _ := args[0].(string)
	switch name {
	case "evalsha":
		if args[1] != acquireScript.sha {
			panic(fmt.Sprintf("unexpected digest %v", args[1]))
		}
	case "eval":
		if args[1] != acquireScript.src {
			panic("unexpected script")
		}
	default:
		panic("unexpected command " + name)
	}
	if n, ok := args[2].(int); !ok || n < 1 || len(args) < 3+n {
		panic(fmt.Sprintf("bad numkeys %v of %d arguments", args[2], len(args)))
	}
	key, _ := args[3].(string)
	p.enqueue(ctx, cmd, name, key)
	return nil
}

func (p *fakePipe) BatchProcess(ctx context.Context, cmds ...redis.Cmder) error {
	for _, c := range cmds {
		if err := p.Process(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (p *fakePipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	p.f.pipelines = append(p.f.pipelines, p.names)
	for _, q := range p.queued {
		q()
	}
	p.queued, p.names = nil, nil
	return nil, errors.New("first error, ignored by lease")
}

func TestRunFallsBackToEvalOnNoScript(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	cmd := acquireScript.run(ctx, f, []string{"a1"})
	if cmd.Err() != nil {
		t.Fatal(cmd.Err())
	}
	if want := []string{"evalsha a1", "eval a1"}; !slices.Equal(f.calls, want) {
		t.Fatalf("calls %q, want %q", f.calls, want)
	}
	// Loaded now: EVALSHA alone.
	f.calls = nil
	if cmd := acquireScript.run(ctx, f, []string{"a2"}); cmd.Err() != nil {
		t.Fatal(cmd.Err())
	}
	if want := []string{"evalsha a2"}; !slices.Equal(f.calls, want) {
		t.Fatalf("calls %q, want %q", f.calls, want)
	}
}

func TestRunDoesNotRetryOtherErrors(t *testing.T) {
	// Any error but NOSCRIPT may come from a script that ran (or may have
	// run): running it again could take tokens twice.
	for _, err := range []error{
		fakeRedisError("ERR something"),
		fakeRedisError("BUSY Redis is busy running a script"),
		&net.OpError{Op: "read", Err: errors.New("connection reset")},
		context.DeadlineExceeded,
	} {
		f := newFake()
		f.failWith['a'] = err
		cmd := acquireScript.run(context.Background(), f, []string{"a1"})
		if !errors.Is(cmd.Err(), err) {
			t.Errorf("%v: got %v", err, cmd.Err())
		}
		if want := []string{"evalsha a1"}; !slices.Equal(f.calls, want) {
			t.Errorf("%v: calls %q, want %q", err, f.calls, want)
		}
	}
}

func TestRunManyRetriesOnlyNoScript(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.loaded['a'] = true // node a has the script, node b lost it
	f.failWith['c'] = fakeRedisError("ERR boom")
	calls := []call{newCall([]string{"a1"}), newCall([]string{"b1"}), newCall([]string{"a2"}), newCall([]string{"c1"}), newCall([]string{"b2"})}
	cmds := acquireScript.runMany(ctx, f, calls)
	if len(f.pipelines) != 2 {
		t.Fatalf("%d pipelines, want 2: %q", len(f.pipelines), f.pipelines)
	}
	if want := []string{"evalsha a1", "evalsha b1", "evalsha a2", "evalsha c1", "evalsha b2"}; !slices.Equal(f.pipelines[0], want) {
		t.Errorf("first pipeline %q, want %q", f.pipelines[0], want)
	}
	if want := []string{"eval b1", "eval b2"}; !slices.Equal(f.pipelines[1], want) {
		t.Errorf("second pipeline %q, want %q", f.pipelines[1], want)
	}
	for i, cmd := range cmds {
		if calls[i].keys[0] == "c1" {
			if !errors.Is(cmd.Err(), fakeRedisError("ERR boom")) {
				t.Errorf("c1: err %v, want ERR boom", cmd.Err())
			}
			continue
		}
		if cmd.Err() != nil {
			t.Errorf("%s: %v", calls[i].keys[0], cmd.Err())
		}
		if _, err := parseGrant(cmd, 1); err != nil {
			t.Errorf("%s: %v", calls[i].keys[0], err)
		}
	}
	if err := commonFailure(cmds); err != nil {
		t.Errorf("commonFailure = %v, want nil (some replies arrived)", err)
	}

	// Once loaded everywhere: one pipeline.
	f.pipelines = nil
	delete(f.failWith, 'c')
	f.loaded['c'] = true
	acquireScript.runMany(ctx, f, calls)
	if len(f.pipelines) != 1 {
		t.Fatalf("%d pipelines, want 1", len(f.pipelines))
	}
}

func TestRunManyEmpty(t *testing.T) {
	f := newFake()
	if cmds := acquireScript.runMany(context.Background(), f, nil); len(cmds) != 0 || len(f.pipelines) != 0 {
		t.Fatalf("empty batch sent %d pipelines", len(f.pipelines))
	}
}

func TestAcquireManyCommonFailure(t *testing.T) {
	f := newFake()
	netErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	c, err := NewClient(f, "")
	if err != nil {
		t.Fatal(err)
	}
	// Keys are "{t:..."; the fake's node is the key's first byte, '{'.
	f.failWith['{'] = netErr
	lim := Limits{Rate: 1, Burst: 10}
	reqs := []Request{{Tenant: "x", Limits: lim, Want: 1}, {Tenant: "y", Limits: lim, Want: -1}, {Tenant: "z", Limits: lim, Want: 1}}
	res, err := c.AcquireMany(context.Background(), reqs, nil)
	if !errors.Is(err, netErr) {
		t.Fatalf("AcquireMany error %v, want the network error", err)
	}
	if !errors.Is(res[0].Err, netErr) || !errors.Is(res[2].Err, netErr) {
		t.Errorf("sent results: %v, %v: want the network error", res[0].Err, res[2].Err)
	}
	if !errors.Is(res[1].Err, ErrBadRequest) {
		t.Errorf("invalid request: %v, want ErrBadRequest", res[1].Err)
	}
	if len(f.pipelines) != 1 || len(f.pipelines[0]) != 2 {
		t.Errorf("pipelines %q: want one with the two valid requests", f.pipelines)
	}
}

func TestCommonFailure(t *testing.T) {
	ctx := context.Background()
	mk := func(err error) *redis.Cmd {
		c := redis.NewCmd(ctx)
		if err != nil {
			c.SetErr(err)
		} else {
			c.SetVal([]interface{}{})
		}
		return c
	}
	netErr := errors.New("i/o timeout")
	for i, tc := range []struct {
		cmds []*redis.Cmd
		fail bool
	}{
		{[]*redis.Cmd{mk(netErr), mk(netErr)}, true},
		{[]*redis.Cmd{mk(netErr), mk(nil)}, false},
		{[]*redis.Cmd{mk(netErr), mk(fakeRedisError("ERR x"))}, false},
		{[]*redis.Cmd{mk(fakeRedisError("ERR x"))}, false},
	} {
		if err := commonFailure(tc.cmds); (err != nil) != tc.fail {
			t.Errorf("case %d: commonFailure = %v, want failure %v", i, err, tc.fail)
		}
	}
}

func TestScriptDigests(t *testing.T) {
	// Digests are what SCRIPT LOAD returns; checked against Redis in
	// TestScriptDigestsAreRedis. Here: distinct and well-formed.
	for _, s := range []*script{acquireScript, releaseScript} {
		if len(s.sha) != 40 || s.src == "" {
			t.Errorf("bad script: sha %q, %d bytes", s.sha, len(s.src))
		}
	}
	if acquireScript.sha == releaseScript.sha {
		t.Error("acquire and release have the same digest")
	}
}
