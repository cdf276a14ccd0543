// Package redistest gives tests a real Redis server.
//
// Start finds one in this order:
//
//  1. REDIS_ADDR, when set: an existing server (host:port) that is reused
//     and never stopped or flushed by the harness;
//  2. a redis-server binary on PATH: a fresh process on a free 127.0.0.1
//     port, with its data directory in a temporary folder, no persistence;
//  3. a Docker daemon that answers: a redis:7 container started through
//     testcontainers-go.
//
// When none of the three is available Start fails with an error naming
// all three, so a test run can never silently skip the Redis tests.
//
// Test packages normally call Main from TestMain and Shared from tests:
// one server per test package, stopped when the package's tests end.
// Tests that kill or restart Redis start their own server with StartServer.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedis is returned by Start when no way to get a Redis worked.
var ErrNoRedis = errors.New("redistest: no Redis available: set REDIS_ADDR to a running server, " +
	"put redis-server on PATH (e.g. apt-get install -y redis-server), " +
	"or run a Docker daemon for testcontainers-go")

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 15 * time.Second

// Server is a Redis server used by tests. Its methods are safe for
// concurrent use.
type Server struct {
	// Addr is host:port of the server.
	Addr string
	// Kind says where the server came from: "env", "process" or "container".
	Kind string

	mu        sync.Mutex // guards cmd and stopped
	cmd       *exec.Cmd  // the redis-server process, nil unless Kind is "process"
	dir       string     // data directory of the process
	port      int
	stopped   bool
	terminate func(context.Context) error // container cleanup
}

// Start returns a running Redis, trying REDIS_ADDR, then a redis-server
// process, then a container. The caller must Close it.
func Start(ctx context.Context) (*Server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		s := &Server{Addr: addr, Kind: "env"}
		if err := waitReady(ctx, addr, startTimeout); err != nil {
			return nil, fmt.Errorf("redistest: REDIS_ADDR=%s does not answer: %w", addr, err)
		}
		return s, nil
	}
	var errs []error
	if path, err := exec.LookPath("redis-server"); err == nil {
		s, err := startProcess(ctx, path)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	s, err := startContainer(ctx)
	if err == nil {
		return s, nil
	}
	errs = append(errs, err)
	return nil, fmt.Errorf("%w (%w)", ErrNoRedis, errors.Join(errs...))
}

func startProcess(ctx context.Context, path string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	var lastErr error
	// A free port can be taken by someone else between our probe and the
	// server's bind; try a few ports before giving up.
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Kind: "process", dir: dir, port: port}
		if err := s.launch(ctx, path); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: redis-server: %w", lastErr)
}

// launch starts the process on s.port and waits until it answers.
func (s *Server) launch(ctx context.Context, path string) error {
	cmd := exec.Command(path,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", "redis.log",
	)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	readyCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitReady(readyCtx, s.Addr, startTimeout) }()
	select {
	case err := <-exited:
		cancel()
		<-ready
		log, _ := os.ReadFile(s.dir + "/redis.log")
		return fmt.Errorf("redis-server exited at start (%v): %s", err, log)
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			<-exited
			return err
		}
	}
	s.mu.Lock()
	s.cmd = cmd
	s.stopped = false
	s.mu.Unlock()
	// Reap the process whenever it ends, so Kill can wait for it.
	go func() {
		<-exited
		s.mu.Lock()
		if s.cmd == cmd {
			s.stopped = true
		}
		s.mu.Unlock()
	}()
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitReady(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	var err error
	for {
		if err = c.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no PING reply from %s: %w", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Client returns a new go-redis client for the server. The caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
}

// Stop kills the redis-server process (SIGKILL, no shutdown save) and
// waits until its port is closed. Only for Kind "process".
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("redistest: Stop needs a server started as a process, this one is %q", s.Kind)
	}
	_ = cmd.Process.Kill()
	return waitClosed(s.Addr)
}

// waitClosed polls until addr refuses connections (a killed server's port
// is closed), for up to startTimeout.
func waitClosed(addr string) error {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return nil
		}
		conn.Close()
		time.Sleep(10 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
	return fmt.Errorf("redistest: %s still accepts connections after kill", addr)
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart(ctx context.Context) error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redistest: Restart: %w", err)
	}
	if s.Kind != "process" {
		return fmt.Errorf("redistest: Restart needs a server started as a process, this one is %q", s.Kind)
	}
	return s.launch(ctx, path)
}

// Close stops what the harness started and removes its files. A server
// named by REDIS_ADDR is left running.
func (s *Server) Close() error {
	switch s.Kind {
	case "process":
		err := s.Stop()
		os.RemoveAll(s.dir)
		return err
	case "container":
		if s.terminate != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return s.terminate(ctx)
		}
	}
	return nil
}

var (
	sharedMu  sync.Mutex // guards shared and sharedErr
	shared    *Server
	sharedErr error
)

// Main runs the package's tests and then stops the shared server, if one
// was started. Call it from TestMain: func TestMain(m *testing.M) { redistest.Main(m) }.
// It routes go-redis' own log lines to the tests that hold a Logger (see
// there).
func Main(m *testing.M) {
	redis.SetLogger(goRedisLogger{})
	code := m.Run()
	sharedMu.Lock()
	if shared != nil {
		shared.Close()
	}
	sharedMu.Unlock()
	os.Exit(code)
}

// Shared returns the test package's shared server, starting it on first
// use. It fails the test when no Redis can be had. Tests sharing it must
// use distinct keys (a per-test key prefix, see Prefix).
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = Start(context.Background())
	}
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// Client returns a client of the shared server, closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := Shared(t).Client()
	t.Cleanup(func() { c.Close() })
	return c
}

// StartServer starts a dedicated redis-server process for one test (one
// that stops or restarts it), stopped when the test ends. It fails the
// test when redis-server is not on PATH.
func StartServer(t testing.TB) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("%v: this test needs its own redis-server process (%v)", ErrNoRedis, err)
	}
	s, err := startProcess(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// Prefix returns a key prefix unique to this test run and test, so tests
// sharing a server never see each other's keys.
func Prefix(t testing.TB) string {
	prefixSeq.Lock()
	prefixSeq.n++
	n := prefixSeq.n
	prefixSeq.Unlock()
	return fmt.Sprintf("lqtest:%d:%d:%d:", os.Getpid(), time.Now().UnixNano()%1e9, n)
}
