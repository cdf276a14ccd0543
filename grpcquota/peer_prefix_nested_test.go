package grpcquota_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// TestPeerPolicyNestedPrefixes checks that the interceptors refuse two
// WithPeerPolicy prefixes of which one starts with the other: "peer" and
// "peer2" key peer 21:db8::1 under the first and peer 1:db8::1 under the
// second both "peer21:db8::1", one bucket for two peers. Were they
// accepted, the test shows the shared bucket: a peer that never called is
// refused by what another peer spent.
func TestPeerPolicyNestedPrefixes(t *testing.T) {
	leakCheck(t)
	q := leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.001, Burst: 1, MaxLease: 1})
	for _, order := range [][2]string{{"peer", "peer2"}, {"peer2", "peer"}} {
		l := newLimiter(t, q) // a bucket of its own for each order
		opts := []grpcquota.Option{grpcquota.WithPeerPolicy("a", order[0]), grpcquota.WithPeerPolicy("b", order[1])}
		intercept, err := newUnary(l, opts...)
		if err == nil {
			t.Errorf("prefixes %q: accepted; %s", order, sharedPeerBucket(intercept))
			continue
		}
		if !errors.Is(err, grpcquota.ErrInvalidOption) {
			t.Errorf("prefixes %q: panicked with %v, want an error wrapping ErrInvalidOption", order, err)
		}
	}
	// Prefixes that share a start but where neither starts with the
	// other remain valid.
	if _, err := newUnary(newLimiter(t, q), grpcquota.WithPeerPolicy("a", "peer4:"), grpcquota.WithPeerPolicy("b", "peer6:")); err != nil {
		t.Errorf("prefixes peer4: and peer6: refused: %v", err)
	}
}

// newUnary returns the unary interceptor of opts, or the error building
// it panicked with.
func newUnary(l *leasequota.Limiter, opts ...grpcquota.Option) (i grpc.UnaryServerInterceptor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
			if err == nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}
	}()
	return grpcquota.UnaryServerInterceptor(l, opts...), nil
}

// sharedPeerBucket makes one call from peer 21:db8::1, then one from
// 1:db8::1, and says what they got.
func sharedPeerBucket(intercept grpc.UnaryServerInterceptor) string {
	call := func(ip string) string {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4711}})
		info := &grpc.UnaryServerInfo{FullMethod: "/test.Service/Call"}
		_, err := intercept(ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil })
		return status.Code(err).String()
	}
	first := call("21:db8::1")
	second := call("1:db8::1")
	return fmt.Sprintf("peer 21:db8::1 got %s, then peer 1:db8::1, on its first call, got %s (a bucket of 1 each)", first, second)
}
