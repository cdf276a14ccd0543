package grpcquota_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// Limit every client of a gRPC server, by API key where the call carries
// one, and by peer address otherwise, as tenant "peer:<address>" (a prefix
// no API key may start with). The API key is the tenant, as it is, for
// WithQuotaFunc and SetQuota. It needs a Redis server, so it is compiled
// but not run.
func ExampleUnaryServerInterceptor() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	l, err := leasequota.New(rdb, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 50, Burst: 100}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	opts := []grpcquota.Option{
		grpcquota.WithMetadataKey("x-api-key"),
		grpcquota.WithPeerFallback("peer:"),
		grpcquota.WithRateLimitMetadata(),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcquota.UnaryServerInterceptor(l, opts...)),
		grpc.ChainStreamInterceptor(grpcquota.StreamServerInterceptor(l, opts...)),
	)
	lis, err := net.Listen("tcp", ":50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}

// PeerKey is the default key: the peer's IP address, without port.
func ExamplePeerKey() {
	ctx := peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 53211},
	})
	fmt.Println(grpcquota.PeerKey(ctx))
	ctx = peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{IP: net.ParseIP("2001:db8::5"), Port: 443},
	})
	fmt.Println(grpcquota.PeerKey(ctx))
	// Output:
	// 192.0.2.7
	// 2001:db8::5
}

// Two policies at once: per peer address and per tenant, decided by one
// AllowAll, so that a call the tenant's quota refuses spends nothing of
// its peer's. WithQuotaFunc gives each key its quota by its prefix. It
// needs a Redis server, so it is compiled but not run.
func ExampleWithPolicy() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	l, err := leasequota.New(rdb, leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
		if strings.HasPrefix(key, "peer:") {
			return leasequota.Per(10, time.Second)
		}
		return leasequota.Per(1000, time.Minute) // or the tenant's plan
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	tenant := grpcquota.MetadataKey("x-tenant")
	opts := []grpcquota.Option{
		grpcquota.WithPeerPolicy("peer", "peer:"),
		grpcquota.WithPolicy("tenant", func(ctx context.Context, method string) string {
			if v := tenant(ctx, method); v != "" {
				return "tenant:" + v
			}
			return "" // InvalidArgument, naming policy "tenant"
		}),
		grpcquota.WithRateLimitMetadata(),
		grpcquota.WithDenialHandler(func(_ context.Context, _ string, d grpcquota.Denial) error {
			if d.Code != codes.ResourceExhausted {
				return nil // the default Unavailable answer
			}
			// Keep the default details (RetryInfo, QuotaFailure), with a
			// message of our own.
			p := d.Status.Proto() // a copy
			p.Message = "slow down (" + d.Policy + ")"
			return status.FromProto(p).Err()
		}),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcquota.UnaryServerInterceptor(l, opts...)),
		grpc.ChainStreamInterceptor(grpcquota.StreamServerInterceptor(l, opts...)),
	)
	lis, err := net.Listen("tcp", ":50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
