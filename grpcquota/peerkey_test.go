package grpcquota_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/peer"

	"github.com/leasequota/leasequota/grpcquota"
)

// TestPeerKey: IPv4 peers, given as 4 bytes or IPv4-mapped in 16 (with a
// zone or not), are their dotted address; IPv6 peers lose their zone;
// other addresses are their String.
func TestPeerKey(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 1234}, "192.0.2.1"},
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, "192.0.2.1"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.255"), Port: 1, Zone: "eth0"}, "10.0.0.255"},
		{&net.TCPAddr{IP: net.IPv4(0, 0, 0, 0), Port: 1}, "0.0.0.0"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::5"), Port: 443, Zone: "eth0"}, "2001:db8::5"},
		{&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 1}, (&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 1}).String()},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, "/tmp/s"},
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: c.addr})
		if got := grpcquota.PeerKey(ctx); got != c.want {
			t.Errorf("PeerKey(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
	if got := grpcquota.PeerKey(context.Background()); got != "" {
		t.Errorf("PeerKey without a peer = %q, want \"\"", got)
	}
}
