// Package redistest gives the integration tests real Redis: a single
// server, a Redis Cluster (StartCluster) or a Sentinel setup
// (StartSentinel).
//
// The single server comes from the library's internal/redisserver, which
// the library's own tests use: REDIS_ADDR when set (reused, never stopped
// or flushed), else a fresh redis-server process on a free 127.0.0.1
// port. This package adds a third way: when neither works, a redis:7
// container started through testcontainers-go, if a Docker daemon
// answers. When none of the three is available Shared fails the test
// with an error naming all three, so a test run can never silently skip
// the Redis tests.
//
// Test packages normally call Main from TestMain and Shared from tests:
// one server per test package, stopped when the package's tests end.
// Tests that kill or restart Redis start their own server with StartServer.
package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

func init() { redisserver.Fallback = startContainer }

// Server is a Redis server used by tests (see redisserver.Server).
type Server = redisserver.Server

// LogBuffer collects a test logger's output (see redisserver.LogBuffer).
type LogBuffer = redisserver.LogBuffer

// ErrNoRedis is the error of a test that could get no Redis.
var ErrNoRedis = redisserver.ErrNoRedis

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = redisserver.StartTimeout

// Main runs the package's tests and then stops the shared server, if one
// was started. Call it from TestMain: func TestMain(m *testing.M) { redistest.Main(m) }.
// It routes go-redis' own log lines to the tests that hold a Logger (see
// there).
func Main(m *testing.M) {
	redis.SetLogger(goRedisLogger{})
	redisserver.Main(m)
}

// Shared returns the test package's shared server, starting it on first
// use: REDIS_ADDR, a redis-server process, or a container. It fails the
// test when no Redis can be had. Tests sharing it must use distinct keys
// (a per-test key prefix, see Prefix).
func Shared(t testing.TB) *Server {
	t.Helper()
	return redisserver.Shared(t)
}

// Client returns a client of the shared server, closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	return redisserver.Client(t)
}

// StartServer starts a dedicated redis-server process for one test (one
// that stops or restarts it), stopped when the test ends. It fails the
// test when redis-server is not on PATH.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return redisserver.StartServer(t)
}

// Prefix returns a key prefix unique to this test run and test, so tests
// sharing a server never see each other's keys.
func Prefix(t testing.TB) string { return redisserver.Prefix(t) }

// waitReady and waitClosed serve the cluster and Sentinel harness's
// processes as they serve the single server's.
func waitReady(ctx context.Context, addr string, timeout time.Duration) error {
	return redisserver.WaitReady(ctx, addr, "", timeout)
}

func waitClosed(addr string) error { return redisserver.WaitClosed(addr) }
