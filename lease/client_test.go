package lease

import (
	"context"
	"net"
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
	t.Run("cluster client", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{closed}})
		defer c.Close()
		if refuses(t, c, ctx) {
			t.Error("Refuses() = true for a Cluster client, which it cannot dial through")
		}
	})
}
