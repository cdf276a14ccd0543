package main

import (
	"bufio"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestProxyCloseWhileDialing: Close returns although a connection it
// accepted was still dialing Redis when Close cut the open ones. The
// connection's goroutine registered its two sides after Close's sweep
// and piped them for ever, so Close waited on it for ever.
func TestProxyCloseWhileDialing(t *testing.T) {
	// The upstream: an echo server, so a piped connection stays open.
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	dialing := make(chan struct{}, 1)
	release := make(chan struct{})
	var d net.Dialer
	var n atomic.Int32
	p, err := newProxyDial(up.Addr().String(), func(ctx context.Context, addr string) (net.Conn, error) {
		if n.Add(1) > 1 { // B's, not A's
			dialing <- struct{}{}
			<-release // held past Close's sweep, whatever ctx says
		}
		return d.DialContext(context.Background(), "tcp", addr)
	})
	if err != nil {
		t.Fatal(err)
	}

	// A: a connection piped through, to see when Close has swept.
	a, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(a).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", line, err)
	}
	// B: accepted, its upstream dial held.
	b, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	select {
	case <-dialing:
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not dial for the second connection")
	}

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	// A reads EOF once Close has cut the open connections.
	a.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.Read(make([]byte, 1)); err == nil {
		t.Fatal("A still open after Close")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("Close did not cut A within 5s")
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waiting 5s after the held dial returned")
	}
	// B was never piped: the proxy closed it.
	b.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Error("B answered after Close")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("B still open 5s after Close")
	}
}
