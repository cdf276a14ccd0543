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
	stream := &benchStream{}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, stream)
	info := &grpc.UnaryServerInfo{FullMethod: stream.Method()}
	if _, err := intercept(ctx, nil, info, bareUnary); err != nil { // the key's first lease
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := intercept(ctx, nil, info, bareUnary); err != nil {
			b.Fatal(err)
		}
	}
	return stream
}

func benchLimiter(b *testing.B) *leasequota.Limiter {
	logger := testLogger(b)
	l, err := leasequota.New(redisserver.Client(b), leasequota.WithKeyPrefix(redisserver.Prefix(b)),
		leasequota.WithLogger(logger), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e9, Burst: 1 << 40}))
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
// WithRateLimitMetadata's header metadata.
func BenchmarkInterceptorOverhead(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchUnary(b, passThrough) })
	b.Run("one-policy", func(b *testing.B) {
		benchUnary(b, grpcquota.UnaryServerInterceptor(benchLimiter(b)))
	})
	b.Run("metadata", func(b *testing.B) {
		s := benchUnary(b, grpcquota.UnaryServerInterceptor(benchLimiter(b), grpcquota.WithRateLimitMetadata()))
		if len(s.header.Get(grpcquota.MetadataRateLimit)) != 1 {
			b.Fatalf("header metadata %v, want ratelimit", s.header)
		}
	})
}
