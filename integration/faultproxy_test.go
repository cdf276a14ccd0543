package integration

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy is a TCP proxy between a client and a Redis server that
// injects network faults: added latency, and a blackhole that accepts
// connections and swallows bytes but never answers.
//
// It is a few dozen lines rather than github.com/Shopify/toxiproxy/v2:
// toxiproxy resolves from the module proxy (v2.5.0), but running it in
// process brings in prometheus, protobuf, zerolog, gorilla/mux and
// urfave/cli for two toxics that this file provides.
//
// Latency delays every proxyChunk read from either side by the latency in force
// when it was read, keeping the order of the stream (so it adds latency,
// not a bandwidth limit). A connection that had bytes swallowed by the
// blackhole stays silent until it is closed, even after the blackhole is
// lifted: its stream lost bytes, so forwarding more could only confuse
// the client (a real network would have delayed them instead, which the
// client cannot tell from a silence as long as its deadline).
type faultProxy struct {
	ln        net.Listener
	target    string
	latency   atomic.Int64 // nanoseconds added to each proxyChunk
	blackhole atomic.Bool

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	accepted atomic.Int64 // connections accepted
	dropped  atomic.Int64 // bytes swallowed by the blackhole
}

// startFaultProxy starts a proxy on a free loopback port forwarding to
// target, closed when the test ends.
func startFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the server's.
func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// SetLatency adds d to every proxyChunk forwarded from now on, each way.
func (p *faultProxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetBlackhole turns the blackhole on or off.
func (p *faultProxy) SetBlackhole(on bool) { p.blackhole.Store(on) }

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *faultProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c, or closes it and reports false once the proxy is
// closed.
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.accepted.Add(1)
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// handle serves one client connection until either side closes it.
func (p *faultProxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	var silent atomic.Bool // the stream lost bytes: never forward again
	if p.blackhole.Load() {
		// Accept, swallow, never answer, never reach the server.
		silent.Store(true)
		p.swallow(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(client, server, &silent) }()
	go func() { defer pipes.Done(); p.pipe(server, client, &silent) }()
	pipes.Wait()
}

// swallow reads c until it fails, discarding everything.
func (p *faultProxy) swallow(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		p.dropped.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// proxyChunk is bytes read from one side, due to be written to the other.
type proxyChunk struct {
	data []byte
	due  time.Time
}

// pipe forwards src to dst with the proxy's faults until src fails; then
// it closes both, which ends the other direction too.
func (p *faultProxy) pipe(src, dst net.Conn, silent *atomic.Bool) {
	ch := make(chan proxyChunk, 256)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-p.done:
					continue // drain: the proxy is closing
				}
			}
			if p.blackhole.Load() || silent.Load() {
				silent.Store(true)
				p.dropped.Add(int64(len(c.data)))
				continue
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.blackhole.Load() || silent.Load() {
				silent.Store(true)
				p.dropped.Add(int64(n))
			} else {
				data := append([]byte(nil), buf[:n]...)
				ch <- proxyChunk{data: data, due: time.Now().Add(time.Duration(p.latency.Load()))}
			}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	writer.Wait()
	src.Close()
	dst.Close()
}

// TestFaultProxy checks the proxy itself: it forwards, delays by the
// latency set, and blackholes.
func TestFaultProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var echoes sync.WaitGroup
	echoes.Add(1)
	go func() {
		defer echoes.Done()
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			echoes.Add(1)
			go func() {
				defer echoes.Done()
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { echo.Close(); echoes.Wait() })
	p := startFaultProxy(t, echo.Addr().String())

	roundTrip := func(c net.Conn, deadline time.Duration) (time.Duration, error) {
		c.SetDeadline(time.Now().Add(deadline))
		start := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			return 0, err
		}
		buf := make([]byte, 4)
		got := 0
		for got < 4 {
			n, err := c.Read(buf[got:])
			if err != nil {
				return 0, err
			}
			got += n
		}
		return time.Since(start), nil
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatalf("forwarding: %v", err)
	}
	p.SetLatency(100 * time.Millisecond)
	took, err := roundTrip(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Each way is delayed: at least 200ms for a round trip.
	if took < 200*time.Millisecond {
		t.Errorf("round trip with 100ms latency each way took %v, want >= 200ms", took)
	}
	p.SetLatency(0)
	p.SetBlackhole(true)
	if _, err := roundTrip(c, 200*time.Millisecond); err == nil {
		t.Error("round trip through the blackhole got an answer")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("the blackhole must accept connections: %v", err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, 200*time.Millisecond); err == nil {
		t.Error("new connection through the blackhole got an answer")
	}
	p.SetBlackhole(false)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(c3, 5*time.Second); err != nil {
		t.Errorf("new connection after the blackhole: %v", err)
	}
	if p.dropped.Load() == 0 {
		t.Error("the blackhole dropped no bytes")
	}
}
