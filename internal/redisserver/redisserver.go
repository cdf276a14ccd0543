// Package redisserver gives tests a real Redis server: the one named by
// REDIS_ADDR, or a fresh redis-server process on a free 127.0.0.1 port.
// It imports only go-redis and the standard library, so that the
// library's tests need no more than the library does; the modules under
// the library's path (integration, grpcquota, cmd/leasequota-sim) import
// it too.
//
// Start finds one in this order:
//
//  1. REDIS_ADDR, when set: an existing server (host:port) that is reused
//     and never stopped or flushed by the harness;
//  2. a redis-server binary on PATH: a fresh process on a free 127.0.0.1
//     port, with its data directory in a temporary folder, no persistence;
//  3. Fallback, when a harness built on this one sets it
//     (integration/redistest starts a Docker container).
//
// When none is available Start fails with an error that says how to get
// one, so a test run can never silently skip the Redis tests.
//
// Test packages normally call Main from TestMain and Shared from tests:
// one server per test package, stopped when the package's tests end.
// Tests that kill or restart Redis start their own server with StartServer.
package redisserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
var ErrNoRedis = errors.New("redisserver: no Redis available: set REDIS_ADDR to a running server " +
	"or put redis-server on PATH (scripts/ensure-redis.sh installs it)")

// StartTimeout bounds how long a server may take to answer PING.
const StartTimeout = 15 * time.Second

// Fallback, when not nil, is how Start gets a Redis when REDIS_ADDR is
// unset and no redis-server process could be started. It is nil in the
// library's tests, which need redis-server; integration/redistest sets it
// to start a container.
var Fallback func(context.Context) (*Server, error)

// Server is a Redis server used by tests. Its methods are safe for
// concurrent use.
type Server struct {
	// Addr is host:port of the server.
	Addr string
	// Password is the server's requirepass: a random one for a server
	// started as a process, so that tests of other processes on this
	// machine that reuse its port after a Stop (or whose port it reuses)
	// can never talk to it, nor it to theirs. Empty for REDIS_ADDR.
	Password string
	// Kind says where the server came from: "env", "process", or the kind
	// given to External (integration/redistest's "container").
	Kind string

	mu        sync.Mutex // guards cmd and stopped
	cmd       *exec.Cmd  // the redis-server process, nil unless Kind is "process"
	dir       string     // data directory of the process
	port      int
	stopped   bool
	terminate func(context.Context) error // cleanup of an External server
}

// External returns a Server for a Redis at addr that was started by other
// means, such as a container; Close calls terminate.
func External(addr, kind string, terminate func(context.Context) error) *Server {
	return &Server{Addr: addr, Kind: kind, terminate: terminate}
}

// Start returns a running Redis, trying REDIS_ADDR, then a redis-server
// process, then Fallback. The caller must Close it.
func Start(ctx context.Context) (*Server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		s := &Server{Addr: addr, Kind: "env"}
		if err := WaitReady(ctx, addr, "", StartTimeout); err != nil {
			return nil, fmt.Errorf("redisserver: REDIS_ADDR=%s does not answer: %w", addr, err)
		}
		return s, nil
	}
	var errs []error
	path, err := exec.LookPath("redis-server")
	if err == nil {
		var s *Server
		if s, err = startProcess(ctx, path); err == nil {
			return s, nil
		}
	}
	errs = append(errs, err)
	if Fallback != nil {
		s, err := Fallback(ctx)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%w (%w)", ErrNoRedis, errors.Join(errs...))
}

func startProcess(ctx context.Context, path string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redisserver-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: temp dir: %w", err)
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
		var pw [16]byte
		rand.Read(pw[:])
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Kind: "process", dir: dir, port: port,
			Password: hex.EncodeToString(pw[:])}
		if err := s.launch(ctx, path); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redisserver: redis-server: %w", lastErr)
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
		"--requirepass", s.Password,
	)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	readyCtx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- WaitReady(readyCtx, s.Addr, s.Password, StartTimeout) }()
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

// WaitReady polls addr until it answers PING with password (empty for
// none), for up to timeout or until ctx is done. A server on addr that
// wants another password never counts as ready.
func WaitReady(ctx context.Context, addr, password string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialTimeout: time.Second})
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
	return redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, ContextTimeoutEnabled: true})
}

// URL returns the server's address as a redis:// URL, password included.
func (s *Server) URL() string {
	if s.Password == "" {
		return "redis://" + s.Addr + "/0"
	}
	return "redis://:" + s.Password + "@" + s.Addr + "/0"
}

// Stop kills the redis-server process (SIGKILL, no shutdown save) and
// waits until its port is closed. Only for Kind "process".
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("redisserver: Stop needs a server started as a process, this one is %q", s.Kind)
	}
	_ = cmd.Process.Kill()
	return WaitClosed(s.Addr)
}

// WaitClosed polls until addr refuses connections (a killed server's port
// is closed), for up to StartTimeout.
func WaitClosed(addr string) error {
	deadline := time.Now().Add(StartTimeout)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return nil
		}
		conn.Close()
		time.Sleep(10 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
	return fmt.Errorf("redisserver: %s still accepts connections after kill", addr)
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart(ctx context.Context) error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redisserver: Restart: %w", err)
	}
	if s.Kind != "process" {
		return fmt.Errorf("redisserver: Restart needs a server started as a process, this one is %q", s.Kind)
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
	default:
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
// was started, and runs cleanups (e.g. removing what TestMain built).
// Call it from TestMain: func TestMain(m *testing.M) { redisserver.Main(m) }.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
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
