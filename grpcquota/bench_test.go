package grpcquota_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
	"github.com/leasequota/leasequota/internal/redisserver"
)

// The overhead of the unary interceptor per call: BenchmarkInterceptorOverhead
// runs a bare interceptor that only calls the handler next to
// UnaryServerInterceptor, in one benchmark, so that a noisy machine
// affects both alike. The call is made in process (no transport): its
// context carries a TCP peer (the key, 192.0.2.1) and a stand-in for the
// server stream that keeps the header metadata it is given, as
// grpc.SetHeader needs. The key holds a large lease, so every call is
// decided locally.

var bareUnary grpc.UnaryHandler = func(context.Context, any) (any, error) { return nil, nil }

// passThrough is the bare interceptor: what a server pays without limits.
func passThrough(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(ctx, req)
}

// benchStream is the server stream of a call made in process: it keeps
// the last header metadata set.
type benchStream struct{ header metadata.MD }

func (s *benchStream) Method() string                  { return "/bench.Service/Call" }
func (s *benchStream) SetHeader(md metadata.MD) error  { s.header = md; return nil }
func (s *benchStream) SendHeader(md metadata.MD) error { s.header = md; return nil }
func (s *benchStream) SetTrailer(metadata.MD) error    { return nil }

func benchUnary(b *testing.B, intercept grpc.UnaryServerInterceptor) *benchStream {
	return benchUnaryPeers(b, intercept, 1)
}

// benchUnaryPeers calls intercept in turn from peers peers, 192.0.2.1 and
// up (each with its own lease, taken before the timer starts).
func benchUnaryPeers(b *testing.B, intercept grpc.UnaryServerInterceptor, peers int) *benchStream {
	stream := &benchStream{}
	ctxs := make([]context.Context, peers)
	for i := range ctxs {
		ip := net.IPv4(192, 0, byte(2+i>>8), byte(1+i))
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: ip, Port: 1234}})
		ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, stream)
	}
	info := &grpc.UnaryServerInfo{FullMethod: stream.Method()}
	for _, ctx := range ctxs {
		if _, err := intercept(ctx, nil, info, bareUnary); err != nil { // the key's first lease
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := intercept(ctxs[i], nil, info, bareUnary); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(ctxs) {
			i = 0
		}
	}
	return stream
}

func benchLimiter(b *testing.B) *leasequota.Limiter {
	return benchLimiterQuota(b, leasequota.Quota{Rate: 1e9, Burst: 1 << 40})
}

func benchLimiterQuota(b *testing.B, q leasequota.Quota) *leasequota.Limiter {
	logger := testLogger(b)
	l, err := leasequota.New(redisserver.Client(b), leasequota.WithKeyPrefix(redisserver.Prefix(b)),
		leasequota.WithLogger(logger), leasequota.WithDefaultQuota(q))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	return l
}

// BenchmarkInterceptorOverhead: the difference of bare and one-policy is
// the unary interceptor's overhead, keyed by peer address; metadata adds
// WithRateLimitMetadata's header metadata. The interceptor keeps the keys
// of the IPv4 peers it saw last (256 slots): one-policy's one peer is
// always there; many-peers calls from 1,024 peers in turn, so that the
// key of almost every call is formatted again (and stored).
func BenchmarkInterceptorOverhead(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchUnary(b, passThrough) })
	b.Run("one-policy", func(b *testing.B) {
		benchUnary(b, grpcquota.UnaryServerInterceptor(benchLimiter(b)))
	})
	b.Run("many-peers", func(b *testing.B) {
		// Leases of at least 2^20 tokens that last a minute, so that no
		// peer's runs dry or expires during the run.
		l := benchLimiterQuota(b, leasequota.Quota{Rate: 1e9, Burst: 1 << 40, MinLease: 1 << 20, LeaseTTL: time.Minute})
		benchUnaryPeers(b, grpcquota.UnaryServerInterceptor(l), 1024)
	})
	b.Run("metadata", func(b *testing.B) {
		s := benchUnary(b, grpcquota.UnaryServerInterceptor(benchLimiter(b), grpcquota.WithRateLimitMetadata()))
		if len(s.header.Get(grpcquota.MetadataRateLimit)) != 1 {
			b.Fatalf("header metadata %v, want ratelimit", s.header)
		}
	})
}
