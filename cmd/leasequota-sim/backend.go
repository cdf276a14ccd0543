package main

import (
	"context"
	"fmt"
	"strings"
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

// Close stops what the backend started.
func (b *backend) Close() {
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
	scripts    []atomic.Int64 // per tenant index
	keyIndex   map[string]int // Redis key -> tenant index; immutable
}

func newCallCounter(keyIndex map[string]int, tenants int) *callCounter {
	return &callCounter{scripts: make([]atomic.Int64, tenants), keyIndex: keyIndex}
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.roundTrips.Add(1)
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.roundTrips.Add(1)
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// count attributes a script command to its tenant: EVAL/EVALSHA args are
// name, script or digest, numkeys, key, ...
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
	key, _ := args[3].(string)
	if i, ok := c.keyIndex[key]; ok {
		c.scripts[i].Add(1)
	}
}
