package grpcquota_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
	"github.com/leasequota/leasequota/lease/memstore"
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
// runs on the in-process store and an in-memory connection; in
// production, give leasequota.New a Redis client and serve on a
// listener, and leave the lease sizes to the limiter (each key here
// leases its whole burst at once, so that the figures are exact). A unit
// refills in 22.5 s for a tenant and 16.7 s for a client, so that t,
// rounded up to whole seconds, does not depend on how long the example
// takes (nor on when the limiter will next call the store, which may
// round the wait up a little).
func ExampleWithPolicy() {
	l, err := leasequota.NewWithStore(memstore.New(), leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
		q := leasequota.Per(2, 45*time.Second) // "tenant:", or the tenant's plan
		if strings.HasPrefix(key, "peer:") {
			q = leasequota.Per(3, 50*time.Second)
		}
		q.MinLease = q.Burst // lease the whole burst at once: exact figures
		return q
	}),
		leasequota.WithLeaseTTL(time.Minute), // leases outlive the example
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
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
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 16)
	go srv.Serve(lis)
	defer srv.Stop()

	// One client, whose peer address is the in-memory connection's.
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	call := func(tenant string) {
		ctx := context.Background()
		if tenant != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
		}
		var md metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Printf("%s: %v %q | %s | %s\n", tenant, st.Code(), st.Message(),
			strings.Join(md.Get(grpcquota.MetadataPolicy), ""), strings.Join(md.Get(grpcquota.MetadataRateLimit), ""))
	}
	call("acme")
	call("acme")
	call("acme")    // acme's quota refuses: nothing spent of the peer's
	call("initech") // so the peer's last unit goes to another tenant
	call("initech")
	// Output:
	// acme: OK "" | "peer";q=3;w=50, "tenant";q=2;w=45 | "tenant";r=1;t=0
	// acme: OK "" | "peer";q=3;w=50, "tenant";q=2;w=45 | "tenant";r=0;t=0
	// acme: ResourceExhausted "slow down (tenant)" | "peer";q=3;w=50, "tenant";q=2;w=45 | "tenant";r=0;t=23
	// initech: OK "" | "peer";q=3;w=50, "tenant";q=2;w=45 | "peer";r=0;t=0
	// initech: ResourceExhausted "slow down (peer)" | "peer";q=3;w=50, "tenant";q=2;w=45 | "peer";r=0;t=17
}
