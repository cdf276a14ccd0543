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
		c := redis.NewClient(&redis.Options{Addr: silentListener(t)})
		defer c.Close()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a listener that accepts connections")
		}
	})
	// Dials that fail without a refusal: Refuses cannot tell, and says
	// false.
	for _, tc := range []struct {
		name string
		err  func(ctx context.Context) error // the dial's error
		ctx  time.Duration                   // Refuses' deadline; 0 for none
	}{
		// A dial that hangs (a blackholed address) until ctx ends.
		{name: "out of time", err: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, ctx: 10 * time.Millisecond},
		// A dial that gives up on its own deadline, ctx still live.
		{name: "dial timeout", err: func(context.Context) error {
			return &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}},
		// Connections reset as they come (an accept queue overflowing).
		{name: "reset", err: func(context.Context) error {
			return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNRESET)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: closed, Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return nil, tc.err(ctx)
			}})
			defer c.Close()
			ctx := ctx
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			if refuses(t, c, ctx) {
				t.Error("Refuses() = true for a dial that was not refused: it cannot tell")
			}
		})
	}
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
		c := redis.NewClient(&redis.Options{Addr: silentListener(t), TLSConfig: &tls.Config{}, DialTimeout: 10 * time.Second})
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

// silentListener returns the address of a listener that never accepts,
// closed when t ends. The kernel completes the handshake of its
// connections: what a paused or flooded Redis looks like to a dial.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}
