package grpcquota_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// TestPeerKeyTypedNil: a peer whose Addr is a nil pointer of one of the
// net package's address types (a typed nil, so not == nil) has no
// address, so no key, as a call without a peer; PeerKey dereferenced a
// nil *net.TCPAddr and panicked, in the interceptor too. The
// interceptor keyed by peer ends such a call with InvalidArgument, as
// one without a peer.
func TestPeerKeyTypedNil(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	intercept := grpcquota.UnaryServerInterceptor(l)
	for _, addr := range []net.Addr{(*net.TCPAddr)(nil), (*net.UDPAddr)(nil), (*net.UnixAddr)(nil), (*net.IPAddr)(nil)} {
		got, err := peerKeyOf(addr)
		if err != nil || got != "" {
			t.Errorf("PeerKey(%T(nil)) = %q, %v; want \"\" and no panic", addr, got, err)
		}
		called := false
		err = func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
			_, err = intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"},
				func(context.Context, any) (any, error) { called = true; return nil, nil })
			return err
		}()
		if status.Code(err) != codes.InvalidArgument || called {
			t.Errorf("a call from %T(nil): %v, handler called %v; want InvalidArgument, not called", addr, err, called)
		}
	}
}

// peerKeyOf returns PeerKey of a call from addr, or the panic it raised.
func peerKeyOf(addr net.Addr) (k string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return grpcquota.PeerKey(peer.NewContext(context.Background(), &peer.Peer{Addr: addr})), nil
}
