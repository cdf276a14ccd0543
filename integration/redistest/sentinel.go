package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelStartTimeout bounds StartSentinel: five processes and the wait
// until the sentinels know the replica and each other.
const sentinelStartTimeout = 30 * time.Second

// SentinelConfig shapes a setup started by StartSentinelWith. Zero fields
// take the defaults documented on them.
type SentinelConfig struct {
	// MasterName is the name the sentinels monitor the master under;
	// default "mymaster".
	MasterName string
	// DownAfter is down-after-milliseconds: how long the master may not
	// answer before a sentinel thinks it down; default 1s.
	DownAfter time.Duration
}

// Sentinel is a Redis Sentinel setup of redis-server processes on
// loopback ports: one master, one replica and three sentinels (quorum 2),
// each in its own temporary directory, with no persistence. Sentinels run
// as redis-server --sentinel, so no redis-sentinel package is needed. It
// is stopped and its files removed when the test that started it ends.
// Its methods are safe for concurrent use.
type Sentinel struct {
	// MasterName is the name the sentinels know the master by.
	MasterName string

	t         testing.TB
	cfg       SentinelConfig
	root      string
	data      []*proc // master and replica, in start order
	sentinels []*proc
}

// StartSentinel starts one master, one replica and three sentinels (see
// StartSentinelWith).
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return StartSentinelWith(t, SentinelConfig{})
}

// StartSentinelWith starts a Sentinel setup shaped by cfg. It returns once
// the replica's link to the master is up and every sentinel sees the
// master, its replica and the two other sentinels, so that a failover can
// happen. Everything is stopped and removed when the test ends.
func StartSentinelWith(t testing.TB, cfg SentinelConfig) *Sentinel {
	t.Helper()
	if cfg.MasterName == "" {
		cfg.MasterName = "mymaster"
	}
	if cfg.DownAfter == 0 {
		cfg.DownAfter = time.Second
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("%v: a sentinel setup needs redis-server on PATH (%v)", ErrNoRedis, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelStartTimeout)
	defer cancel()
	s, err := startSentinel(ctx, cfg)
	if s != nil {
		s.t = t
		t.Cleanup(s.close)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startSentinel(ctx context.Context, cfg SentinelConfig) (*Sentinel, error) {
	root, err := os.MkdirTemp("", "redistest-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	s := &Sentinel{MasterName: cfg.MasterName, cfg: cfg, root: root}
	master, err := s.startData(ctx, "master", "")
	if err != nil {
		return s, err
	}
	s.data = append(s.data, master)
	replica, err := s.startData(ctx, "replica", master.Addr)
	if err != nil {
		return s, err
	}
	s.data = append(s.data, replica)
	if err := poll(ctx, 20*time.Millisecond, "replica link", func(ctx context.Context) error {
		info, err := nodeInfo(ctx, replica.Addr, "info", "replication")
		if err != nil {
			return err
		}
		if v := field(info, "master_link_status"); v != "up" {
			return fmt.Errorf("%s: master_link_status:%s", replica.Addr, v)
		}
		return nil
	}); err != nil {
		return s, err
	}
	for i := 0; i < 3; i++ {
		p, err := s.startSentinel(ctx, i, master.Port)
		if err != nil {
			return s, err
		}
		s.sentinels = append(s.sentinels, p)
	}
	if err := poll(ctx, 50*time.Millisecond, "sentinels not ready", s.checkReady); err != nil {
		return s, err
	}
	return s, nil
}

// startData starts a data node (master, or replica of replicaOf).
func (s *Sentinel) startData(ctx context.Context, name, replicaOf string) (*proc, error) {
	dir := filepath.Join(s.root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startOnFreePorts(ctx, dir, 1, "sentinel setup "+name, func(ports []int) ([]string, error) {
		args := []string{
			"--port", strconv.Itoa(ports[0]),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--repl-diskless-sync-delay", "0",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--loglevel", "warning",
			"--logfile", "redis.log",
		}
		if replicaOf != "" {
			host, port, _ := strings.Cut(replicaOf, ":")
			args = append(args, "--replicaof", host, port)
		}
		return args, nil
	})
}

// startSentinel starts sentinel i monitoring the master on masterPort.
func (s *Sentinel) startSentinel(ctx context.Context, i, masterPort int) (*proc, error) {
	dir := filepath.Join(s.root, fmt.Sprintf("sentinel%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startOnFreePorts(ctx, dir, 1, fmt.Sprintf("sentinel %d", i), func(ports []int) ([]string, error) {
		// A sentinel rewrites its configuration file, so it gets its own.
		conf := strings.Join([]string{
			"port " + strconv.Itoa(ports[0]),
			"bind 127.0.0.1",
			"daemonize no",
			"dir " + dir,
			"logfile redis.log",
			"loglevel warning",
			"sentinel announce-ip 127.0.0.1",
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", s.MasterName, masterPort),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.MasterName, s.cfg.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s 10000", s.MasterName),
			fmt.Sprintf("sentinel parallel-syncs %s 1", s.MasterName),
			"",
		}, "\n")
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		return []string{path, "--sentinel"}, nil
	})
}

// checkReady returns nil when every live sentinel sees the master as up,
// with its replica, and the other live sentinels.
func (s *Sentinel) checkReady(ctx context.Context) error {
	live := s.liveSentinels()
	for _, addr := range live {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		m, err := sc.Master(ctx, s.MasterName).Result()
		if err != nil {
			sc.Close()
			return fmt.Errorf("sentinel %s: %w", addr, err)
		}
		replicas, err := sc.Replicas(ctx, s.MasterName).Result()
		sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", addr, err)
		}
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: master flags %q", addr, m["flags"])
		}
		if got, want := m["num-other-sentinels"], strconv.Itoa(len(live)-1); got != want {
			return fmt.Errorf("sentinel %s: knows %s other sentinels, want %s", addr, got, want)
		}
		up := 0
		for _, r := range replicas {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" {
				up++
			}
		}
		if up == 0 {
			return fmt.Errorf("sentinel %s: no healthy replica among %d", addr, len(replicas))
		}
	}
	return nil
}

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string { return addrsOf(s.sentinels, false) }

func (s *Sentinel) liveSentinels() []string { return addrsOf(s.sentinels, true) }

// FailoverOptions returns options of a failover client of the setup, to
// adjust before redis.NewFailoverClient. ContextTimeoutEnabled is set, as
// leasequota asks of its clients.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true}
}

// FailoverClient returns a new failover client (a *redis.Client that asks
// the sentinels where the master is), closed when the test ends. Tests
// that check for goroutine leaks should close their clients themselves
// (redis.NewFailoverClient(s.FailoverOptions())).
func (s *Sentinel) FailoverClient() *redis.Client {
	c := redis.NewFailoverClient(s.FailoverOptions())
	s.t.Cleanup(func() { c.Close() })
	return c
}

// MasterAddr returns the master's address as every live sentinel reports
// it, or an error when they disagree or do not answer.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var addr string
	for _, sa := range s.liveSentinels() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sa, MaxRetries: -1, DialTimeout: time.Second})
		hp, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		sc.Close()
		if err != nil {
			return "", fmt.Errorf("redistest: sentinel %s: %w", sa, err)
		}
		if len(hp) != 2 {
			return "", fmt.Errorf("redistest: sentinel %s: master address %v", sa, hp)
		}
		a := hp[0] + ":" + hp[1]
		if addr != "" && a != addr {
			return "", fmt.Errorf("redistest: sentinels disagree on the master: %s vs %s", addr, a)
		}
		addr = a
	}
	if addr == "" {
		return "", errors.New("redistest: no live sentinel")
	}
	return addr, nil
}

// KillMaster kills the current master with SIGKILL and waits until its
// port refuses connections. It returns the dead master's address.
// WaitFailover waits for the sentinels to promote the replica.
func (s *Sentinel) KillMaster(ctx context.Context) (string, error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range s.data {
		if p.Addr == addr {
			return addr, p.kill()
		}
	}
	return "", fmt.Errorf("redistest: master %s is not a node of this setup", addr)
}

// WaitFailover waits, polling, until every live sentinel reports a master
// other than old, and that node says it is a master. It returns the new
// master's address.
func (s *Sentinel) WaitFailover(ctx context.Context, old string) (string, error) {
	var addr string
	err := poll(ctx, 25*time.Millisecond, "no failover", func(ctx context.Context) error {
		a, err := s.MasterAddr(ctx)
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("sentinels still report %s", old)
		}
		info, err := nodeInfo(ctx, a, "info", "replication")
		if err != nil {
			return err
		}
		if r := field(info, "role"); r != "master" {
			return fmt.Errorf("%s: role:%s", a, r)
		}
		addr = a
		return nil
	})
	return addr, err
}

// close kills every process and removes the files.
func (s *Sentinel) close() {
	stopAll(s.root, append(append([]*proc(nil), s.sentinels...), s.data...))
}
