package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// backend is the Redis the simulation runs on: an embedded miniredis, or
// a server given by URL; for the outage scenario, reached through a
// proxy that can black-hole it.
type backend struct {
	Label   string                // for humans
	opts    *redis.Options        // base options of every client (single server)
	cluster *redis.ClusterOptions // base options with -redis-cluster, else nil
	mini    *miniredis.Miniredis
	proxy   *proxy

	// cpuClient reads INFO cpu (straight from the server, never through
	// the proxy); made on first use, guarded by cpuMu.
	cpuMu      sync.Mutex
	cpuClient  *redis.Client
	cpuCluster *redis.ClusterClient
}

// openBackend starts (or reaches) Redis and checks that it answers.
func openBackend(ctx context.Context, cfg Config, withProxy bool) (*backend, error) {
	b := &backend{Label: cfg.redisLabel()}
	if cfg.RedisCluster != "" {
		b.cluster = &redis.ClusterOptions{Addrs: cfg.clusterAddrs(), ContextTimeoutEnabled: true}
		c := redis.NewClusterClient(b.cluster)
		defer c.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.ForEachMaster(pctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
			return nil, fmt.Errorf("redis %s: not every master answers PING: %w", b.Label, err)
		}
		return b, nil
	}
	if cfg.RedisURL == "" {
		b.mini = miniredis.NewMiniRedis()
		if err := b.mini.Start(); err != nil {
			return nil, fmt.Errorf("embedded Redis: %w", err)
		}
		b.opts = &redis.Options{Addr: b.mini.Addr()}
	} else {
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, err
		}
		b.opts = opts
	}
	// Honour the per-call deadline the limiter puts on the context
	// (WithRedisTimeout): without this go-redis waits ReadTimeout (3 s)
	// on a server that does not answer.
	b.opts.ContextTimeoutEnabled = true
	if withProxy {
		p, err := newProxy(b.opts.Addr)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.proxy = p
	}
	c := redis.NewClient(b.opts)
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		b.Close()
		return nil, fmt.Errorf("redis %s does not answer PING: %w", b.Label, err)
	}
	return b, nil
}

// newClient returns a client for one instance, counting its calls in cc.
// Through the proxy when there is one.
func (b *backend) newClient(cc *callCounter) redis.UniversalClient {
	if b.cluster != nil {
		o := *b.cluster
		c := redis.NewClusterClient(&o)
		if cc != nil {
			c.AddHook(cc)
		}
		return c
	}
	o := *b.opts
	if b.proxy != nil {
		o.Addr = b.proxy.Addr()
	}
	c := redis.NewClient(&o)
	if cc != nil {
		c.AddHook(cc)
	}
	return c
}

// setDown makes Redis unreachable (true) or reachable again (false).
func (b *backend) setDown(down bool) {
	if b.proxy != nil {
		b.proxy.SetDown(down)
	}
}

// cpuSample is Redis server CPU time (user + system, all threads) read
// from INFO cpu, summed over the masters of a cluster; ok is false when
// it could not be read (the embedded Redis has none).
type cpuSample struct {
	used time.Duration
	ok   bool
}

// cpuSince is the CPU Redis used between two samples, and whether both
// were read.
func cpuSince(from, to cpuSample) (time.Duration, bool) {
	if !from.ok || !to.ok || to.used < from.used {
		return 0, false
	}
	return to.used - from.used, true
}

// redisCPU reads the CPU time Redis has used so far, straight from the
// server (never through the outage proxy). miniredis runs inside this
// process and reports no CPU: not ok.
func (b *backend) redisCPU(ctx context.Context) cpuSample {
	if b.mini != nil {
		return cpuSample{}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	b.cpuMu.Lock()
	defer b.cpuMu.Unlock()
	if b.cluster != nil {
		if b.cpuCluster == nil {
			b.cpuCluster = redis.NewClusterClient(b.cluster)
		}
		c := b.cpuCluster
		var mu sync.Mutex
		var sum time.Duration
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "cpu").Result()
			if err != nil {
				return err
			}
			d, err := parseCPU(info)
			mu.Lock()
			sum += d
			mu.Unlock()
			return err
		})
		return cpuSample{used: sum, ok: err == nil}
	}
	if b.cpuClient == nil {
		b.cpuClient = redis.NewClient(b.opts)
	}
	info, err := b.cpuClient.Info(ctx, "cpu").Result()
	if err != nil {
		return cpuSample{}
	}
	d, err := parseCPU(info)
	return cpuSample{used: d, ok: err == nil}
}

// parseCPU returns used_cpu_user + used_cpu_sys (seconds) of an INFO cpu
// reply.
func parseCPU(info string) (time.Duration, error) {
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", k, err)
		}
		sum += x
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu: no used_cpu_user and used_cpu_sys in %q", info)
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// Close stops what the backend started.
func (b *backend) Close() {
	b.cpuMu.Lock()
	if b.cpuClient != nil {
		b.cpuClient.Close()
	}
	if b.cpuCluster != nil {
		b.cpuCluster.Close()
	}
	b.cpuMu.Unlock()
	if b.proxy != nil {
		b.proxy.Close()
	}
	if b.mini != nil {
		b.mini.Close()
	}
}

// callCounter is a go-redis hook that counts round trips (a pipeline
// counts once, like the limiter's Stats.Calls) and script runs per tenant.
// The limiter's syncer pipelines many tenants into one round trip, so
// script runs are what can be attributed to a tenant class.
type callCounter struct {
	roundTrips atomic.Int64
	commands   atomic.Int64
	evals      atomic.Int64   // script runs (EVAL and EVALSHA), whatever their keys
	scripts    []atomic.Int64 // per tenant index
	keyIndex   map[string]int // Redis key -> tenant index; immutable
	// ledger, when not nil, reads the lease scripts' replies (the account
	// of the tight scenario); shared by every instance's counter.
	ledger *bucketLedger
}

func newCallCounter(keyIndex map[string]int, tenants int) *callCounter {
	return &callCounter{scripts: make([]atomic.Int64, tenants), keyIndex: keyIndex}
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.roundTrips.Add(1)
		c.count(cmd)
		err := next(ctx, cmd)
		if c.ledger != nil {
			c.ledger.observe(cmd)
		}
		return err
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.roundTrips.Add(1)
		for _, cmd := range cmds {
			c.count(cmd)
		}
		err := next(ctx, cmds)
		if c.ledger != nil {
			for _, cmd := range cmds {
				c.ledger.observe(cmd)
			}
		}
		return err
	}
}

// count attributes a script command to its tenants: EVAL/EVALSHA args
// are name, script or digest, numkeys, keys..., and a call of a batch
// (lease.WithBatch) carries several tenants' keys, each bucket key a run
// of the script for its tenant.
func (c *callCounter) count(cmd redis.Cmder) {
	c.commands.Add(1)
	args := cmd.Args()
	if len(args) < 4 {
		return
	}
	name, _ := args[0].(string)
	if !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return
	}
	c.evals.Add(1)
	numkeys, _ := args[2].(int)
	for _, a := range args[3:min(3+max(numkeys, 1), len(args))] {
		key, _ := a.(string)
		if i, ok := c.keyIndex[key]; ok {
			c.scripts[i].Add(1)
		}
	}
}
