package leasequota_test

import (
	"context"
	"iter"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/bucket"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/syncer"
)

// BenchmarkTenantMemory measures the heap one tracked tenant costs: it
// makes two waves of 100,000 tenants (one request each,
// WithColdStartWait(0)) on the in-process store, lets the syncer lease
// them and give the leases back when they expire, and measures
// HeapAlloc (after a full GC) twice a wave: once the first leases are
// back (idle tenants, which keep their lease state for a while, and about
// half of which then hold a renewed lease of a token, its ledger batches
// included: B/tenant), and
// once every tenant has gone dormant (idle for 16 half-lives of the
// demand, 8 s by default: B/dormant-tenant; see syncer.Tenant). Each is
// the growth over the second wave divided by its tenants, from the first
// wave's dormant measure: what the first wave made once (the syncer's
// reusable slices) is not a per-tenant cost. The name bytes are part of
// it: the limiter keeps the string it was given. The store's own state
// (the global buckets, which live in Redis in production) is dropped
// before each measure (droppable), so that only the limiter's heap
// counts. The idle timeout is 10 minutes, so that the first wave's
// tenants stay tracked (by default they go after a minute).
//
// It reports B/tenant, B/dormant-tenant and allocs/tenant; the goal is
// <= 128 B per tracked tenant, which dormant tenants meet, and idle ones
// within 8 s of their last request do not. The sizes of the structs that
// make up a tenant are logged, to show where the bytes go.
func BenchmarkTenantMemory(b *testing.B) {
	const tenants = 100_000
	ctx := context.Background()
	q := leasequota.Quota{Rate: 1000, Burst: 1000}
	coldLease := int64(q.Rate * leasequota.DefaultRefreshInterval.Seconds()) // each tenant's first lease

	var perTenant, perDormant, allocsPerTenant float64
	var nameBytes int
	b.ReportAllocs()
	for b.Loop() {
		store := &droppable{}
		store.Drop()
		l := manyTenantsLimiter(b, store, leasequota.WithDefaultQuota(q), leasequota.WithIdleTimeout(10*time.Minute))
		// Two waves of tenants; the second's growth is the measure, so that
		// what the first wave made once (the syncer's reusable slices) does
		// not count.
		buf := make([]byte, 0, 32)
		nameBytes = 0
		measure := func() (heap, mallocs uint64) {
			store.Drop() // the buckets would be in Redis: not the limiter's heap
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc, ms.Mallocs
		}
		type point struct{ heap, mallocs uint64 }
		wave := func(from int) (idle, dormant point) {
			for i := from; i < from+tenants; i++ {
				buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
				if from > 0 {
					nameBytes += len(buf)
				}
				l.AllowN(ctx, string(buf), 1)
			}
			settle(b, l, int64(from+tenants), coldLease)
			idle.heap, idle.mallocs = measure()
			waitDormant(b, l)
			dormant.heap, dormant.mallocs = measure()
			return idle, dormant
		}
		_, dormant1 := wave(0)
		idle2, dormant2 := wave(tenants)
		if n := l.Tenants(); n != 2*tenants {
			b.Fatalf("%d tenants tracked, want %d", n, 2*tenants)
		}
		perTenant = float64(int64(idle2.heap)-int64(dormant1.heap)) / tenants
		perDormant = float64(int64(dormant2.heap)-int64(dormant1.heap)) / tenants
		allocsPerTenant = float64(idle2.mallocs-dormant1.mallocs) / tenants
		runtime.KeepAlive(l)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l.Close(cctx)
		cancel()
	}
	b.ReportMetric(perTenant, "B/tenant")
	b.ReportMetric(perDormant, "B/dormant-tenant")
	b.ReportMetric(allocsPerTenant, "allocs/tenant")

	var (
		t   syncer.Tenant
		st  syncer.State
		led syncer.Ledger
		tb  bucket.TokenBucket
		lim leasequota.Quota
	)
	b.Logf("%d tenants: %.0f B/tenant idle, %.0f B/tenant dormant, %.1f allocs/tenant (growth of HeapAlloc after a full GC: live data only)",
		tenants, perTenant, perDormant, allocsPerTenant)
	b.Logf("sizes: syncer.Tenant %d B (the registry entry; its size class is the allocation; all a dormant tenant keeps); "+
		"until dormant, its lease state (128 B with syncer.State, %d B, of which syncer.Ledger %d B; the ledger's batches, 48 B, only while a lease is held); "+
		"tenant name %.1f B on average (plus its size class rounding); "+
		"registry: a read table of 8 B pointer + 1 tag byte per slot at up to 7/8 load, so 10-21 B per tenant, "+
		"and a Go map (16 B key + 8 B value + 1 control byte per slot) for the tenants added since its last copy; "+
		"until dormant, an entry in the syncer's set of the tenants its ticks walk (a Go map: 8 B key + 1 control byte per slot); "+
		"not per tenant: the syncer's record of a base quota (a Quota, %d B, and a pointer) shared by the tenants of one quota; "+
		"only once Redis has failed for a tenant: bucket.TokenBucket %d B (its FailLocal fallback)",
		unsafe.Sizeof(t), unsafe.Sizeof(st), unsafe.Sizeof(led), float64(nameBytes)/tenants,
		unsafe.Sizeof(lim), unsafe.Sizeof(tb))
}

// droppable is a Backend on an in-process store that Drop replaces with
// an empty one, freeing the global buckets: what Redis would hold, outside
// the limiter's heap. Each view moves to the new store on its next call,
// with a fresh memstore view (its own release ids).
type droppable struct {
	mu    sync.Mutex
	store *memstore.Store
	gen   int              // raised by Drop
	views []*droppableView // for Drop to let go of the old store's views
}

// Drop replaces the store with an empty one; nothing refers to the old
// one after it (unless a call is in flight).
func (d *droppable) Drop() {
	d.mu.Lock()
	d.store = memstore.New()
	d.gen++
	views := d.views
	d.mu.Unlock()
	for _, v := range views {
		v.mu.Lock()
		v.view = nil
		v.mu.Unlock()
	}
}

func (d *droppable) Instance(id string, window time.Duration) (lease.Store, error) {
	v := &droppableView{d: d, id: id, window: window}
	if _, err := v.cur(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.views = append(d.views, v)
	d.mu.Unlock()
	return v, nil
}

type droppableView struct {
	d      *droppable
	id     string
	window time.Duration

	mu   sync.Mutex
	gen  int
	view lease.Store
}

// cur returns the view of the current store.
func (v *droppableView) cur() (lease.Store, error) {
	v.d.mu.Lock()
	store, gen := v.d.store, v.d.gen
	v.d.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.view == nil || v.gen != gen {
		view, err := store.Instance(v.id, v.window)
		if err != nil {
			return nil, err
		}
		v.view, v.gen = view, gen
	}
	return v.view, nil
}

func (v *droppableView) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	s, err := v.cur()
	if err != nil {
		return nil, err
	}
	return s.AcquireMany(ctx, reqs, results)
}

func (v *droppableView) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	s, err := v.cur()
	if err != nil {
		out := make([]lease.ReleaseResult, len(reqs))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return s.ReleaseMany(ctx, reqs)
}

func (v *droppableView) GetOverride(ctx context.Context, tenant string) (*lease.Override, error) {
	s, err := v.cur()
	if err != nil {
		return nil, err
	}
	return s.GetOverride(ctx, tenant)
}

func (v *droppableView) SetOverride(ctx context.Context, tenant string, base lease.Limits, o lease.Override) (float64, error) {
	s, err := v.cur()
	if err != nil {
		return 0, err
	}
	return s.SetOverride(ctx, tenant, base, o)
}

func (v *droppableView) DeleteOverride(ctx context.Context, tenant string, base lease.Limits) (float64, error) {
	s, err := v.cur()
	if err != nil {
		return 0, err
	}
	return s.DeleteOverride(ctx, tenant, base)
}

func (v *droppableView) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	s, err := v.cur()
	if err != nil {
		return func(yield func(lease.ListedOverride, error) bool) { yield(lease.ListedOverride{}, err) }
	}
	return s.ListOverrides(ctx)
}

func (v *droppableView) QuotaVersion(ctx context.Context) (int64, error) {
	s, err := v.cur()
	if err != nil {
		return 0, err
	}
	return s.QuotaVersion(ctx)
}

// settle waits until the syncer has leased each of the tenants tracked
// its first lease, the leases have expired and been given back (a
// tenant's record has the same size with or without a lease), and the
// syncer has gone quiet, so that no pipeline's buffers are live when the
// heap is measured.
func settle(b *testing.B, l *leasequota.Limiter, tenants, coldLease int64) {
	deadline := time.Now().Add(time.Minute)
	for last := int64(-1); ; {
		st := l.Stats()
		back := st.Returned + st.Forfeited
		if st.Granted >= tenants*coldLease && back >= st.Granted-tenants && st.Calls == last {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("syncer not settled after 1 minute: %+v", st)
		}
		last = st.Calls
		time.Sleep(100 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
}

// waitDormant waits until every tenant l tracks is dormant (see
// syncer.Tenant).
func waitDormant(b *testing.B, l *leasequota.Limiter) {
	deadline := time.Now().Add(time.Minute)
	for leasequota.DormantTenants(l) != l.Tenants() {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d tenants dormant after 1 minute", leasequota.DormantTenants(l), l.Tenants())
		}
		time.Sleep(100 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
}

// manyTenantsLimiter returns a Limiter on b for benchmarks that make
// 100,000 tenants at once, each with one request: it waits for no first
// lease (WithColdStartWait(0)), logs nothing, and gives each call to the
// store a second (opts may say more). With the default 50ms, the first
// leases of 100,000 tenants at once may time out on a loaded machine (on
// Redis they do: integration.TestManyTenantsColdStartOnHealthyRedis).
func manyTenantsLimiter(tb testing.TB, b leasequota.Backend, opts ...leasequota.Option) *leasequota.Limiter {
	tb.Helper()
	opts = append([]leasequota.Option{leasequota.WithColdStartWait(0), leasequota.WithRedisTimeout(time.Second),
		leasequota.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	l, err := leasequota.NewWithStore(b, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
