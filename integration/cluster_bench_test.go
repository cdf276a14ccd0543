package integration

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/syncer"
)

// benchTenants is the number of active tenants in one sync round.
const benchTenants = 10_000

// benchWindow is the registry window BenchmarkSyncRound's instance
// registers with: a Limiter's with the default lease TTL and refresh
// interval and no reservations (syncer.RegistryWindow), unless
// -syncround.window says otherwise (2.1 s was the window before the credit
// span).
var benchWindow = flag.Duration("syncround.window", syncer.RegistryWindow(leasequota.DefaultLeaseTTL, leasequota.DefaultRefreshInterval, 0),
	"the registry window of BenchmarkSyncRound's instance")

// BenchmarkSyncRound measures the Redis side of one sync round for 10,000
// active tenants: one acquire per tenant, on a standalone redis-server
// and on a 3-master, 3-replica cluster (all processes on this machine).
// Each op is one round, done two ways:
//
//   - pipeline: one lease.Client.AcquireMany of all 10,000 tenants (one
//     pipeline; go-redis splits it per master on the cluster);
//   - batches: as the syncer does it, AcquireMany of 1,000 tenants at a
//     time, at most 8 in flight (the syncer's batchSize and maxInFlight).
//
// On the standalone server each is also run with lease.WithBatch (the
// Limiter's default there): "pipeline-batchN" and "batches-batchN" send N
// tenants per script call.
//
// Besides ns/op (per round) it reports the Redis CPU a round costs,
// from INFO cpu (used_cpu_user + used_cpu_sys) before and after: on the
// masters, and on the cluster's replicas, which apply every write again.
// The lease client registers an instance like a Limiter's does, so each
// acquire is the two-key script a Limiter runs.
func BenchmarkSyncRound(b *testing.B) {
	b.Run("standalone", func(b *testing.B) {
		srv := redistest.StartServer(b)
		c := srv.Client()
		defer c.Close()
		for _, n := range []int{1, 8, 16, 32} {
			benchDeployment(b, c, []*redis.Client{c}, nil, n)
		}
	})
	b.Run("cluster", func(b *testing.B) {
		cl := redistest.StartCluster(b)
		c := redis.NewClusterClient(cl.ClientOptions())
		defer c.Close()
		ctx := context.Background()
		nodes, err := cl.Nodes(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var masters, replicas []*redis.Client
		for _, n := range nodes {
			if n.Master {
				masters = append(masters, cl.NodeClient(n.Addr))
			} else {
				replicas = append(replicas, cl.NodeClient(n.Addr))
			}
		}
		benchDeployment(b, c, masters, replicas, 1)
	})
}

// benchDeployment runs the two kinds of round with batch tenants per
// script call (1: a call per tenant).
func benchDeployment(b *testing.B, c lease.Scripter, masters, replicas []*redis.Client, batch int) {
	lc, err := lease.NewClient(c, redistest.Prefix(b), lease.WithInstance("bench", *benchWindow), lease.WithBatch(batch))
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]lease.Request, benchTenants)
	for i := range reqs {
		// A rate that refills faster than the benchmark drains, so every
		// acquire is granted in full, as for a tenant within its quota.
		reqs[i] = lease.Request{Tenant: fmt.Sprintf("tenant-%05d", i), Limits: lease.Limits{Rate: 1e9, Burst: 1 << 30}, Want: 10}
	}
	suffix := ""
	if batch > 1 {
		suffix = fmt.Sprintf("-batch%d", batch)
	}
	b.Run("pipeline"+suffix, func(b *testing.B) {
		results := make([]lease.Result, len(reqs))
		benchRounds(b, masters, replicas, func(ctx context.Context) error {
			var err error
			results, err = lc.AcquireMany(ctx, reqs, results)
			return firstResultErr(results, err)
		})
	})
	b.Run("batches"+suffix, func(b *testing.B) {
		const batch, inFlight = 1000, 8
		results := make([][]lease.Result, len(reqs)/batch)
		for i := range results {
			results[i] = make([]lease.Result, batch)
		}
		benchRounds(b, masters, replicas, func(ctx context.Context) error {
			var g errgroup.Group
			g.SetLimit(inFlight)
			for i := range results {
				g.Go(func() error {
					var err error
					results[i], err = lc.AcquireMany(ctx, reqs[i*batch:(i+1)*batch], results[i])
					return firstResultErr(results[i], err)
				})
			}
			return g.Wait()
		})
	})
}

// benchRounds runs round b.N times (after one untimed round that loads
// the scripts and creates the keys) and reports Redis CPU per round.
func benchRounds(b *testing.B, masters, replicas []*redis.Client, round func(context.Context) error) {
	ctx := context.Background()
	if err := round(ctx); err != nil {
		b.Fatal(err)
	}
	cpu := func(nodes []*redis.Client) float64 {
		return sumInfoFields(b, nodes, "cpu", "used_cpu_user", "used_cpu_sys")
	}
	mBefore, rBefore := cpu(masters), cpu(replicas)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := round(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((cpu(masters)-mBefore)*1e3/float64(b.N), "master-cpu-ms/op")
	if len(replicas) > 0 {
		b.ReportMetric((cpu(replicas)-rBefore)*1e3/float64(b.N), "replica-cpu-ms/op")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchTenants, "ns/tenant")
}

// firstResultErr returns err, or the first error of a result.
func firstResultErr(results []lease.Result, err error) error {
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
