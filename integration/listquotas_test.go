package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// scanCounter counts the SCANs each node is sent.
type scanCounter struct {
	mu     sync.Mutex
	byNode map[string]int
}

// hook returns the hook that counts node's SCANs.
func (s *scanCounter) hook(node string) redis.Hook { return scanHook{s, node} }

type scanHook struct {
	s    *scanCounter
	node string
}

func (h scanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			h.s.mu.Lock()
			h.s.byNode[h.node]++
			h.s.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h scanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *scanCounter) reset() {
	s.mu.Lock()
	clear(s.byNode)
	s.mu.Unlock()
}

func (s *scanCounter) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for k, v := range s.byNode {
		m[k] = v
	}
	return m
}

// listQuotas lists l's quotas, failing on any error; a tenant listed twice
// must be listed alike.
func listQuotas(t *testing.T, l *leasequota.Limiter) map[string]leasequota.TenantQuota {
	t.Helper()
	got := map[string]leasequota.TenantQuota{}
	for tq, err := range l.ListQuotas(context.Background()) {
		if err != nil {
			t.Fatalf("ListQuotas: %v", err)
		}
		if prev, ok := got[tq.Tenant]; ok && prev != tq {
			t.Fatalf("%.20q listed twice, differently: %+v, %+v", tq.Tenant, prev, tq)
		}
		got[tq.Tenant] = tq
	}
	return got
}

// setQuotas stores want with l, eight at a time.
func setQuotas(t *testing.T, l *leasequota.Limiter, want map[string]leasequota.Quota) {
	t.Helper()
	var g errgroup.Group
	g.SetLimit(8)
	for tenant, q := range want {
		g.Go(func() error { return l.SetQuota(context.Background(), tenant, q) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestListQuotas runs the listing on one Redis and on a 3-master cluster:
// more quotas than a SCAN page holds on each node, long (hashed) tenant
// names, a key prefix of glob characters beside the prefixes its pattern
// would match unescaped, a ctx canceled mid-listing, and quotas deleted
// while the listing runs.
func TestListQuotas(t *testing.T) {
	def := leasequota.Quota{Rate: 1, Burst: 1}
	for _, backend := range []struct {
		name   string
		client func(t *testing.T, sc *scanCounter) redis.UniversalClient
	}{
		{"redis", func(t *testing.T, sc *scanCounter) redis.UniversalClient {
			c := redistest.Client(t)
			c.AddHook(sc.hook(c.Options().Addr))
			return c
		}},
		{"cluster", func(t *testing.T, sc *scanCounter) redis.UniversalClient {
			opts := redistest.StartCluster(t).ClientOptions()
			opts.OnConnect = nil
			c := redis.NewClusterClient(opts)
			c.OnNewNode(func(n *redis.Client) { n.AddHook(sc.hook(n.Options().Addr)) })
			t.Cleanup(func() { c.Close() })
			return c
		}},
	} {
		t.Run(backend.name, func(t *testing.T) {
			ctx := context.Background()
			sc := &scanCounter{byNode: map[string]int{}}
			rdb := backend.client(t, sc)
			base := redistest.Prefix(t)
			// Glob prefixes, and prefixes their patterns would match were
			// their glob characters not escaped (a backslash escapes the
			// brace after the prefix).
			prefix := base + "*?[ab]"
			l := newRedisLimiter(t, rdb, prefix, leasequota.WithDefaultQuota(def))
			slash := newRedisLimiter(t, rdb, base+`q\`, leasequota.WithDefaultQuota(def))
			if err := slash.SetQuota(ctx, "slash", def); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{base + "xyza", base + "zb", base + "q"} {
				o := newRedisLimiter(t, rdb, p, leasequota.WithDefaultQuota(def))
				if err := o.SetQuota(ctx, "of "+p, def); err != nil {
					t.Fatal(err)
				}
			}
			if got := listQuotas(t, slash); len(got) != 1 || got["slash"].Quota != def {
				t.Errorf("prefix %q lists %v, want its one quota", base+`q\`, got)
			}
			sc.reset()

			want := map[string]leasequota.Quota{}
			for i := range 2500 {
				want[fmt.Sprintf("t%04d", i)] = leasequota.Quota{Rate: float64(i + 1), Burst: int64(i%50 + 1)}
			}
			long := strings.Repeat("a long tenant name ", 10)
			for i := range 20 {
				want[fmt.Sprint(long, i)] = leasequota.Quota{Rate: 2, Burst: int64(i + 1), MaxLease: 1}
			}
			setQuotas(t, l, want)

			got := listQuotas(t, l)
			if len(got) != len(want) {
				t.Errorf("listed %d quotas, want %d", len(got), len(want))
			}
			for tenant, q := range want {
				if tq, ok := got[tenant]; !ok || tq.Quota != q {
					t.Errorf("%.30q listed as %+v (%v), want %+v", tenant, tq, ok, q)
				}
			}
			scans := sc.counts()
			t.Logf("SCANs per node: %v", scans)
			wantNodes := 1
			if backend.name == "cluster" {
				wantNodes = 3
			}
			if len(scans) != wantNodes {
				t.Errorf("SCANs went to %d nodes, want %d", len(scans), wantNodes)
			}
			for node, n := range scans {
				if n < 2 {
					t.Errorf("node %s: %d SCAN calls, want more than one page", node, n)
				}
			}

			// Canceled after the first quota: nothing more but the error.
			cctx, cancel := context.WithCancel(ctx)
			listed, errs := 0, 0
			for _, err := range l.ListQuotas(cctx) {
				if err != nil {
					errs++
					if !errors.Is(err, context.Canceled) {
						t.Errorf("after cancel: %v, want context.Canceled", err)
					}
					continue
				}
				listed++
				cancel()
			}
			cancel()
			if listed != 1 || errs != 1 {
				t.Errorf("canceled after the first: %d listed and %d errors; want 1 and 1", listed, errs)
			}

			// Quotas deleted after the first is listed: every other one
			// is listed still.
			deleted := map[string]bool{}
			seen := map[string]bool{}
			for tq, err := range l.ListQuotas(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if tq.Quota != want[tq.Tenant] {
					t.Fatalf("%.30q listed as %+v, want %+v", tq.Tenant, tq.Quota, want[tq.Tenant])
				}
				if len(seen) == 0 {
					for tenant := range want {
						if len(deleted) < len(want)/2 && tenant != tq.Tenant {
							deleted[tenant] = true
						}
					}
					var g errgroup.Group
					g.SetLimit(8)
					for tenant := range deleted {
						g.Go(func() error { return l.DeleteQuota(ctx, tenant) })
					}
					if err := g.Wait(); err != nil {
						t.Fatal(err)
					}
				}
				seen[tq.Tenant] = true
			}
			late := 0
			for tenant := range want {
				if !deleted[tenant] && !seen[tenant] {
					t.Errorf("%.30q, never deleted, not listed", tenant)
				}
				if deleted[tenant] && seen[tenant] {
					late++
				}
			}
			if late == len(deleted) {
				t.Errorf("all %d deleted quotas listed", late)
			}
			t.Logf("%d deleted while listing, %d of them listed (read before)", len(deleted), late)
		})
	}
}
