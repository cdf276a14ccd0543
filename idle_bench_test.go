package leasequota_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// BenchmarkIdleTenantsCPU measures the CPU a Limiter spends on tenants
// that are no longer asked for: 100,000 tenants each make one request
// (WithColdStartWait(0)) on the in-process store, and the process's CPU
// time (user and system, getrusage) is measured in three windows of wall
// time after the last request: 0-2 s, while the first leases are held
// (cores-leased); 3-6 s, once they expired and went back, before the
// tenants may go dormant (cores-idle); and 12-16 s, once they are
// dormant (cores-dormant), well within the idle timeout. Nothing else
// runs in the process, so it is what the syncer's rounds cost: a tick
// comes four times an interval, and walks the tenants that are not
// dormant, every tracked one at least once a second (syncer/awake.go). It
// runs for about 17 s an op, and make benchsmoke skips it.
func BenchmarkIdleTenantsCPU(b *testing.B) {
	const tenants = 100_000
	ctx := context.Background()
	var leased, idle, dormant float64
	for b.Loop() {
		l := manyTenantsLimiter(b, memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}))
		buf := make([]byte, 0, 32)
		for i := range tenants {
			buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
			l.AllowN(ctx, string(buf), 1)
		}
		start := time.Now()
		cores := func(from, to time.Duration) float64 {
			time.Sleep(time.Until(start.Add(from)))
			c0, w0 := processCPU(b), time.Now()
			time.Sleep(time.Until(start.Add(to)))
			c1, w1 := processCPU(b), time.Now()
			return float64(c1-c0) / float64(w1.Sub(w0))
		}
		leased = cores(0, 2*time.Second)
		idle = cores(3*time.Second, 6*time.Second)
		dormant = cores(12*time.Second, 16*time.Second)
		if n := l.Tenants(); n != tenants {
			b.Fatalf("%d tenants tracked, want %d", n, tenants)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l.Close(cctx)
		cancel()
	}
	b.ReportMetric(leased, "cores-leased")
	b.ReportMetric(idle, "cores-idle")
	b.ReportMetric(dormant, "cores-dormant")
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
