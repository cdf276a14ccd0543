package lease

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestRefuses: Refuses dials Redis as the client's pool would, and says
// true only when the dial is refused: not for a Redis that accepts
// (whether or not it answers), nor when the dial runs out of time, nor
// for a client it cannot dial through (a Cluster client).
func TestRefuses(t *testing.T) {
	ctx := context.Background()
	refuses := func(t *testing.T, s Scripter, ctx context.Context) bool {
		t.Helper()
		c, err := NewClient(s, redisserver.Prefix(t))
		if err != nil {
			t.Fatal(err)
		}
		return c.Refuses(ctx)
	}
	t.Run("up", func(t *testing.T) {
		if refuses(t, redisserver.Client(t), ctx) {
			t.Error("Refuses() = true for a running Redis")
		}
	})
	// A port that nothing listens on: bound, then closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	t.Run("closed port", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: closed})
		defer c.Close()
		if !refuses(t, c, ctx) {
			t.Error("Refuses() = false for a port that refuses connections")
		}
	})
	t.Run("accepts, never answers", func(t *testing.T) {
		// The kernel completes the handshake of a listener that never
		// accepts: what a paused or flooded Redis looks like to a dial.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
		defer c.Close()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a listener that accepts connections")
		}
	})
	t.Run("out of time", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: closed, Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done() // a dial that hangs (a blackholed address)
			return nil, ctx.Err()
		}})
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a dial that ran out of time: it cannot tell")
		}
	})
	t.Run("dial timeout", func(t *testing.T) {
		// A dial that gives up on its own deadline, ctx still live.
		c := redis.NewClient(&redis.Options{Addr: closed, Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}})
		defer c.Close()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a dial that timed out: it cannot tell")
		}
	})
	t.Run("reset", func(t *testing.T) {
		// Connections reset as they come (an accept queue overflowing):
		// not a refusal.
		c := redis.NewClient(&redis.Options{Addr: closed, Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNRESET)}
		}})
		defer c.Close()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a connection reset")
		}
	})
	t.Run("TLS, closed port", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: closed, TLSConfig: &tls.Config{}})
		defer c.Close()
		if !refuses(t, c, ctx) {
			t.Error("Refuses() = false for a TLS client of a port that refuses connections")
		}
	})
	t.Run("TLS, no handshake", func(t *testing.T) {
		// go-redis's TLS dialer does not heed ctx in the handshake: the
		// transport alone is dialed, so Refuses returns within ctx.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), TLSConfig: &tls.Config{}, DialTimeout: 10 * time.Second})
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		began := time.Now()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a listener that accepts connections")
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("Refuses took %v with a 50 ms ctx and a 10 s DialTimeout: it waited for the handshake", took)
		}
	})
	t.Run("cluster client", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{closed}})
		defer c.Close()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a Cluster client, which it cannot dial through")
		}
	})
}
