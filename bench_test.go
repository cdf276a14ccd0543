package leasequota_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/time/rate"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// The benchmarks in this file compare leasequota's request path with the
// baselines a team would otherwise use, in one run:
//
//   - BenchmarkAllow / BenchmarkAllowParallel (and ...OneCount, with
//     WithPerCPUTokens(0)): leasequota with a tenant
//     holding a large lease (no store call on the request path; the
//     limiter leases from the in-process store, which the request path
//     never touches, so the figures are those of a limiter on Redis);
//   - BenchmarkRateMutexMap / BenchmarkRateSyncMap: golang.org/x/time/rate
//     limiters keyed by tenant in a map behind a mutex, and in a sync.Map:
//     local only, no global bound.
//
// The per-request Redis limiter leasequota replaces (one Lua script call
// per decision) is integration's BenchmarkRedisPerRequest, beside
// BenchmarkAllowOnRedis, a limiter on the same Redis.

// bigQuota lets a tenant lease enough tokens for any b.N: every lease is
// at least 2^30 tokens, so the request path never runs short.
var bigQuota = leasequota.Quota{Rate: 1e12, Burst: 1 << 40, MinLease: 1 << 30}

func benchLimiter(b *testing.B, opts ...leasequota.Option) *leasequota.Limiter {
	b.Helper()
	opts = append([]leasequota.Option{leasequota.WithDefaultQuota(bigQuota),
		leasequota.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	l, err := leasequota.NewWithStore(memstore.New(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func tenantNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	return names
}

// leasedTenants returns n tenant names, each holding its lease in l (its
// first request admitted). The first requests wait for their leases
// (WaitN, up to 10 s): Allow's cold start waits 100 ms, which a 1,024th
// tenant's lease missed on a loaded machine ("first request denied").
func leasedTenants(b *testing.B, l *leasequota.Limiter, n int) []string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := tenantNames(n)
	for _, name := range names {
		if _, err := l.WaitN(ctx, name, 1); err != nil {
			b.Fatal("first request denied: ", err)
		}
	}
	return names
}

func BenchmarkAllow(b *testing.B) {
	benchAllow(b, benchLimiter(b))
}

// BenchmarkAllowTelemetry is BenchmarkAllow with a real OpenTelemetry SDK
// MeterProvider (a reader collecting every 10ms) and TracerProvider
// installed: the request path records nothing synchronously, so the
// difference from BenchmarkAllow is noise.
func BenchmarkAllowTelemetry(b *testing.B) {
	benchAllow(b, benchLimiter(b, sdkProviders(b)...))
}

func BenchmarkAllowN(b *testing.B) {
	benchAllowN(b, benchLimiter(b))
}

func BenchmarkAllowNTelemetry(b *testing.B) {
	benchAllowN(b, benchLimiter(b, sdkProviders(b)...))
}

// sdkProviders returns options installing real SDK providers, shut down
// when the benchmark ends.
func sdkProviders(b *testing.B) []leasequota.Option {
	reader := sdkmetric.NewPeriodicReader(discardExporter{}, sdkmetric.WithInterval(10*time.Millisecond))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() {
		mp.Shutdown(context.Background())
		tp.Shutdown(context.Background())
	})
	return []leasequota.Option{leasequota.WithMeterProvider(mp), leasequota.WithTracerProvider(tp)}
}

func benchAllow(b *testing.B, l *leasequota.Limiter) {
	if !l.Allow("t") { // the cold start: lease the tokens first
		b.Fatal("first request denied")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !l.Allow("t") {
			b.Fatal("denied")
		}
	}
}

func benchAllowN(b *testing.B, l *leasequota.Limiter) {
	ctx := context.Background()
	if !l.AllowN(ctx, "t", 1).Allowed {
		b.Fatal("first request denied")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !l.AllowN(ctx, "t", 1).Allowed {
			b.Fatal("denied")
		}
	}
}

// BenchmarkAllowAll is AllowAll over 1 to 4 tenants, each holding a large
// lease: next to BenchmarkAllowN, the cost per extra key; 0 allocs.
func BenchmarkAllowAll(b *testing.B) {
	for k := 1; k <= 4; k++ {
		b.Run(strconv.Itoa(k)+"keys", func(b *testing.B) {
			l := benchLimiter(b)
			ctx := context.Background()
			keys := []string{"ip:203.0.113.7", "tenant:acme", "tenant:acme:user:42", "global"}[:k]
			for _, key := range keys {
				if !l.AllowN(ctx, key, 1).Allowed {
					b.Fatal("first request denied")
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !l.AllowAll(ctx, 1, keys...).Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

// discardExporter drops metrics: the benchmark measures collection's cost
// on the limiter, not an exporter's.
type discardExporter struct{}

func (discardExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}
func (discardExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}
func (discardExporter) Export(context.Context, *metricdata.ResourceMetrics) error { return nil }
func (discardExporter) ForceFlush(context.Context) error                          { return nil }
func (discardExporter) Shutdown(context.Context) error                            { return nil }

func BenchmarkAllowParallel(b *testing.B) { benchAllowParallel(b, benchLimiter(b)) }

// BenchmarkAllowParallelOneCount is BenchmarkAllowParallel with
// WithPerCPUTokens(0): every tenant keeps its tokens in one count, whose
// cache line then moves between the two cores on every decision. By
// default (BenchmarkAllowParallel) every tenant here is hot (tens of
// thousands of decisions a second) and spent from both cores, so each
// keeps its tokens in a slot per P, and the two goroutines spend from
// different slots.
func BenchmarkAllowParallelOneCount(b *testing.B) {
	benchAllowParallel(b, benchLimiter(b, leasequota.WithPerCPUTokens(0)))
}

// BenchmarkAllowParallelPerCPU is BenchmarkAllowParallel with
// WithPerCPUTokens(DefaultPerCPUDemand) spelled out: the default now,
// kept under its name for the figures of releases where the option was
// off by default (docs/performance.md, "Tokens per CPU").
func BenchmarkAllowParallelPerCPU(b *testing.B) {
	benchAllowParallel(b, benchLimiter(b, leasequota.WithPerCPUTokens(leasequota.DefaultPerCPUDemand)))
}

// BenchmarkAllowParallelDisjoint is BenchmarkAllowParallel with each
// goroutine on tenants of its own (the first on 0-511, the second on
// 512-1023): no tenant's count is spent from two cores, the most two
// cores can do over this many tenants, to set BenchmarkAllowParallel's
// and ...OneCount's figures against.
func BenchmarkAllowParallelDisjoint(b *testing.B) {
	l := benchLimiter(b)
	names := leasedTenants(b, l, 1024)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		base := int(seq.Add(1)-1) * 512
		for i := 0; pb.Next(); i++ {
			if !l.Allow(names[(base+i&511)&1023]) {
				b.Error("denied")
				return
			}
		}
	})
}

// benchAllowParallel is Allow over 1,024 tenants under b.RunParallel, the
// goroutines walking the same tenants 97 apart, so that each tenant's
// count is spent from both cores in turn.
func benchAllowParallel(b *testing.B, l *leasequota.Limiter) {
	names := leasedTenants(b, l, 1024)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 97
		for pb.Next() {
			if !l.Allow(names[i&1023]) {
				b.Error("denied")
				return
			}
			i++
		}
	})
}

// BenchmarkAllowTenants is issue #16's measure of the hot path: Allow on
// one goroutine over 1,024 tenants in turn, each holding its lease, next
// to BenchmarkRateMutexMapTenants, the same loop through x/time/rate
// limiters in a map behind a mutex. Run both in one command for the
// ratio:
//
//	go test -run '^$' -bench 'Tenants$' -benchmem -count 5 .
func BenchmarkAllowTenants(b *testing.B) { benchAllowTenants(b, benchLimiter(b)) }

// BenchmarkAllowTenantsOneCount is BenchmarkAllowTenants with
// WithPerCPUTokens(0). By default (BenchmarkAllowTenants) the tenants
// here, hot, are split into slots per P and joined again once the syncer
// finds them spent from one P: the two should not differ.
func BenchmarkAllowTenantsOneCount(b *testing.B) {
	benchAllowTenants(b, benchLimiter(b, leasequota.WithPerCPUTokens(0)))
}

// BenchmarkAllowTenantsPerCPU is BenchmarkAllowTenants with
// WithPerCPUTokens(DefaultPerCPUDemand) spelled out, as
// BenchmarkAllowParallelPerCPU is.
func BenchmarkAllowTenantsPerCPU(b *testing.B) {
	benchAllowTenants(b, benchLimiter(b, leasequota.WithPerCPUTokens(leasequota.DefaultPerCPUDemand)))
}

func benchAllowTenants(b *testing.B, l *leasequota.Limiter) {
	names := leasedTenants(b, l, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !l.Allow(names[i&1023]) {
			b.Fatal("denied")
		}
	}
}

// BenchmarkRateMutexMapTenants is BenchmarkAllowTenants's baseline.
func BenchmarkRateMutexMapTenants(b *testing.B) {
	r := &rateMutexMap{m: map[string]*rate.Limiter{}}
	names := tenantNames(1024)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !r.allow(names[i&1023]) {
			b.Fatal("denied")
		}
	}
}

// rateMutexMap is the baseline: x/time/rate limiters per tenant in a map
// behind a mutex.
type rateMutexMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (r *rateMutexMap) allow(tenant string) bool {
	r.mu.Lock()
	l := r.m[tenant]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(bigQuota.Rate), int(bigQuota.Burst))
		r.m[tenant] = l
	}
	r.mu.Unlock()
	return l.Allow()
}

// rateSyncMap is the baseline with a sync.Map.
type rateSyncMap struct{ m sync.Map }

func (r *rateSyncMap) allow(tenant string) bool {
	v, ok := r.m.Load(tenant)
	if !ok {
		v, _ = r.m.LoadOrStore(tenant, rate.NewLimiter(rate.Limit(bigQuota.Rate), int(bigQuota.Burst)))
	}
	return v.(*rate.Limiter).Allow()
}

func BenchmarkRateMutexMap(b *testing.B) {
	r := &rateMutexMap{m: map[string]*rate.Limiter{}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !r.allow("t") {
			b.Fatal("denied")
		}
	}
}

func BenchmarkRateMutexMapParallel(b *testing.B) {
	r := &rateMutexMap{m: map[string]*rate.Limiter{}}
	names := tenantNames(1024)
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 97
		for pb.Next() {
			r.allow(names[i&1023])
			i++
		}
	})
}

func BenchmarkRateSyncMap(b *testing.B) {
	r := &rateSyncMap{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !r.allow("t") {
			b.Fatal("denied")
		}
	}
}

func BenchmarkRateSyncMapParallel(b *testing.B) {
	r := &rateSyncMap{}
	names := tenantNames(1024)
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 97
		for pb.Next() {
			r.allow(names[i&1023])
			i++
		}
	})
}
