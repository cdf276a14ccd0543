package main

import (
	"context"
	"io"
	"net"
	"sync"
)

// proxy is a TCP proxy in front of Redis that can black-hole it: while
// down, it cuts every open connection and holds new ones open without
// answering, so clients see what an unreachable server looks like
// (timeouts), not a polite refusal.
type proxy struct {
	ln     net.Listener
	target string

	// ctx ends at Close, so that a dial in flight gives up.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	down   bool
	closed bool                  // set by Close: nothing new is piped or held after it
	conns  map[net.Conn]struct{} // every connection, both sides
	held   []net.Conn            // accepted while down, never answered
	wg     sync.WaitGroup

	// dial opens the upstream side (newProxyDial: tests hold it).
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

func newProxy(target string) (*proxy, error) {
	var d net.Dialer
	return newProxyDial(target, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
}

// newProxyDial is newProxy with the upstream dial given (tests hold it).
func newProxyDial(target string, dial func(ctx context.Context, addr string) (net.Conn, error)) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, dial: dial}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is where clients connect.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			// Accepted before Close shut the listener, after its sweep.
			p.mu.Unlock()
			c.Close()
			return
		}
		if p.down {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	defer p.wg.Done()
	up, err := p.dial(p.ctx, p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	// Close may have swept the open connections while this one dialed:
	// piped now, it would never be cut, and Close would wait for ever.
	if p.down || p.closed {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// SetDown black-holes Redis (true) or restores it (false).
func (p *proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down == down {
		return
	}
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		return
	}
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}

// Close stops the proxy and waits for its goroutines. A connection
// accepted or dialing as Close runs is closed, not piped.
func (p *proxy) Close() {
	p.ln.Close()
	p.cancel()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
	p.mu.Unlock()
	p.wg.Wait()
}
