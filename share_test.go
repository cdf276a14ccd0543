package leasequota_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// shareRun is what runShares measured.
type shareRun struct {
	admitted      []int64 // by tenant, over the whole run
	steadyAdmit   []int64 // by tenant, after the warm-up
	steadyCalls   int64   // lease calls after the warm-up, over every limiter
	sharesInForce int     // tenants whose bucket had rate shares in force at the end
	afterClose    int     // and once every limiter had closed
}

// runShares runs 4 limiters (their own loops) on one memstore inside a
// synctest bubble, each offered 3/4 of the rate of each of 10 tenants
// (3x the rate in all; Rate 100, Burst 100), for 40 s of fake time, the
// last 20 the steady state; opts are the limiters' options.
func runShares(t *testing.T, opts ...leasequota.Option) shareRun {
	return runSharesAt(t, 100, opts...)
}

// runSharesAt is runShares with tenants of the given rate (and a burst of
// the rate).
func runSharesAt(t *testing.T, rate float64, opts ...leasequota.Option) shareRun {
	const (
		instances = 4
		tenants   = 10
		warmup    = 20 * time.Second
		length    = 40 * time.Second
		tick      = 10 * time.Millisecond
	)
	var r shareRun
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		lims := make([]*leasequota.Limiter, instances)
		for i := range lims {
			l, err := leasequota.NewWithStore(store, append([]leasequota.Option{
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: rate, Burst: int64(rate)}),
				leasequota.WithInstanceID(fmt.Sprintf("i%d", i)),
				leasequota.WithSeed(uint64(i + 1)),
				leasequota.WithLogger(slog.New(slog.DiscardHandler)),
			}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			lims[i] = l
		}
		names := make([]string, tenants)
		for k := range names {
			names[k] = fmt.Sprintf("t%d", k)
		}
		start := time.Now()
		admitted := make([][]int64, instances)
		steady := make([][]int64, instances)
		done := make(chan struct{}, instances)
		for i, l := range lims {
			admitted[i], steady[i] = make([]int64, tenants), make([]int64, tenants)
			go func() {
				defer func() { done <- struct{}{} }()
				acc := 0.0
				for time.Since(start) < length {
					time.Sleep(tick) // the load's pace, on the fake clock
					acc += 0.75 * rate * tick.Seconds()
					for ; acc >= 1; acc-- {
						for k, n := range names {
							if l.AllowN(context.Background(), n, 1).Allowed {
								admitted[i][k]++
								if time.Since(start) >= warmup {
									steady[i][k]++
								}
							}
						}
					}
				}
			}()
		}
		time.Sleep(warmup) // the run's schedule
		var calls0 int64
		for _, l := range lims {
			calls0 += l.Stats().Calls
		}
		for range lims {
			<-done
		}
		for _, l := range lims {
			r.steadyCalls += l.Stats().Calls
		}
		r.steadyCalls -= calls0
		for _, n := range names {
			if b := store.Tenant(n).Bucket; b != nil && b.Shares.InForce() {
				r.sharesInForce++
			}
		}
		elapsed := time.Since(start)
		r.admitted, r.steadyAdmit = make([]int64, tenants), make([]int64, tenants)
		for k := range names {
			for i := range lims {
				r.admitted[k] += admitted[i][k]
				r.steadyAdmit[k] += steady[i][k]
			}
			if bound := rate + rate*elapsed.Seconds(); float64(r.admitted[k]) > bound {
				t.Errorf("%s admitted %d, past Burst + Rate*T = %.0f", names[k], r.admitted[k], bound)
			}
		}
		for _, l := range lims {
			if err := l.Close(context.Background()); err != nil {
				t.Error(err)
			}
		}
		for _, n := range names {
			if b := store.Tenant(n).Bucket; b != nil && b.Shares.InForce() {
				r.afterClose++
			}
		}
	})
	return r
}

// TestRateSharesCutCalls: with rate shares, an over-demanded fleet's
// instances call Redis about once a share period per tenant in the
// steady state, a fraction of the calls of leases of tokens, and the
// tenants still get their rate; Close ends the shares. (The bound is TestSimulation's, with
// shares in half of its scenarios.)
func TestRateSharesCutCalls(t *testing.T) {
	const pairs, steadySeconds = 4 * 10, 20.0
	leases := runShares(t)
	shares := runShares(t, leasequota.WithRateShares(10*time.Second, 0))
	perPair := func(r shareRun) float64 { return float64(r.steadyCalls) / pairs / steadySeconds }
	util := func(r shareRun) float64 {
		least := 1.0
		for _, n := range r.steadyAdmit {
			least = min(least, float64(n)/(100*steadySeconds))
		}
		return least
	}
	t.Logf("steady state: leases of tokens %.3f calls a pair and second, the least tenant %.3f of its rate; rate shares %.3f and %.3f, %d of 10 tenants with shares in force at the end",
		perPair(leases), util(leases), perPair(shares), util(shares), shares.sharesInForce)
	if shares.sharesInForce == 0 {
		t.Fatalf("no tenant had rate shares in force")
	}
	if shares.afterClose != 0 {
		t.Errorf("%d tenants had rate shares in force once every limiter had closed, want none (Close ends them)", shares.afterClose)
	}
	if got := perPair(shares); got > 0.15 || got > perPair(leases)/3 {
		t.Errorf("rate shares: %.3f calls a pair and second, want at most 0.15 (one a period, 0.1, and the calls before shares) and a third of the leases' %.3f", got, perPair(leases))
	}
	if got := util(shares); got < 0.95 {
		t.Errorf("rate shares: the least tenant admitted %.3f of its rate in the steady state, want >= 0.95", got)
	}
}

// TestWithRateSharesBadInput: a period out of range, a headroom out of
// [0, 1) (NaN included) and shares beside reservations are refused with
// ErrInvalidOption.
func TestWithRateSharesBadInput(t *testing.T) {
	q := leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10})
	for _, o := range []leasequota.Option{
		leasequota.WithRateShares(time.Millisecond, 0),
		leasequota.WithRateShares(-time.Second, 0),
		leasequota.WithRateShares(2*leasequota.MaxSharePeriod, 0),
		leasequota.WithRateShares(10*time.Second, 1),
		leasequota.WithRateShares(10*time.Second, -0.1),
		leasequota.WithRateShares(0, math.NaN()),
	} {
		_, err := leasequota.NewWithStore(memstore.New(), q, o)
		if !errors.Is(err, leasequota.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRateShares") {
			t.Errorf("%v, want ErrInvalidOption naming WithRateShares", err)
		}
	}
	_, err := leasequota.NewWithStore(memstore.New(), q, leasequota.WithRateShares(10*time.Second, 0), leasequota.WithReservation(time.Second))
	if !errors.Is(err, leasequota.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRateShares and WithReservation") {
		t.Errorf("shares and reservations: %v, want ErrInvalidOption naming both", err)
	}
	l, err := leasequota.NewWithStore(memstore.New(), q, leasequota.WithRateShares(0, 0), leasequota.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("WithRateShares(0, 0) (off): %v", err)
	}
	l.Close(context.Background())
}

// TestShareRenewalWithLongIntervals: with a refresh interval long beside
// the share period (500 ms and 1 s), a share is still renewed about once
// a period and the tenants get their rate. Renewed two intervals before
// its end, every renewal came in an epoch's first half, which grants a
// share to the epoch's end only: renewed at every tick, its accrual
// restarting each time (Planner.renewAt).
func TestShareRenewalWithLongIntervals(t *testing.T) {
	const pairs, steadySeconds = 4 * 10, 20.0
	r := runShares(t, leasequota.WithRefreshInterval(500*time.Millisecond), leasequota.WithLeaseTTL(time.Second),
		leasequota.WithRateShares(time.Second, 0))
	least := 1.0
	for _, n := range r.steadyAdmit {
		least = min(least, float64(n)/(100*steadySeconds))
	}
	perPair := float64(r.steadyCalls) / pairs / steadySeconds
	t.Logf("steady state: %.3f calls a pair and second, the least tenant %.3f of its rate", perPair, least)
	if perPair > 1.5 {
		t.Errorf("%.3f calls a pair and second, want at most 1.5 (a renewal a period of 1 s, and the calls before shares)", perPair)
	}
	if least < 0.9 {
		t.Errorf("the least tenant admitted %.3f of its rate in the steady state, want >= 0.9", least)
	}
}

// TestShareRenewalKeepsTheFraction: small shares (tenants of a rate of 8
// on 4 instances with a period of 1 s, and of 4 with 2 s, 3 times over)
// give the tenants their rate. Each renewal restarted the share's accrual
// from the reply, so the part of a token the old share had accrued was
// lost, half a token a period on average: 0.469 and 0.487 of the rate
// for the least tenant (Planner.SharedAfter carries it over now), within
// Burst + Rate*T (runSharesAt).
func TestShareRenewalKeepsTheFraction(t *testing.T) {
	for _, c := range []struct {
		rate   float64
		period time.Duration
	}{{8, time.Second}, {4, 2 * time.Second}} {
		r := runSharesAt(t, c.rate, leasequota.WithLeaseTTL(time.Second), leasequota.WithRateShares(c.period, 0))
		least := 1.0
		for _, n := range r.steadyAdmit {
			least = min(least, float64(n)/(c.rate*20))
		}
		t.Logf("rate %v, period %v: the least tenant admitted %.3f of its rate in the steady state", c.rate, c.period, least)
		if least < 0.9 {
			t.Errorf("rate %v, period %v: the least tenant admitted %.3f of its rate in the steady state, want >= 0.9", c.rate, c.period, least)
		}
	}
}

// TestSmallShareRenewedOncePerPeriod: shares of a token or two a period
// (tenants of a rate of 4 and of 6 on 4 instances, 3 times over, period
// 1 s) are renewed about once a period and give the tenants their rate.
// Such a share comes due whole up to a token's time before it ends: the
// planner then forgot it (Redis still held it) and asked at once, and
// renewAt counted back from the last token; either way the new ask came
// in the epoch's first half, which grants a share to that epoch's end
// only, and asked again (heldShare.end).
func TestSmallShareRenewedOncePerPeriod(t *testing.T) {
	for _, rate := range []float64{4, 6} {
		r := runSharesAt(t, rate, leasequota.WithLeaseTTL(time.Second), leasequota.WithRateShares(time.Second, 0))
		least := 1.0
		for _, n := range r.steadyAdmit {
			least = min(least, float64(n)/(rate*20))
		}
		perPair := float64(r.steadyCalls) / 40 / 20
		t.Logf("rate %v: %.3f calls a pair and second, the least tenant %.3f of its rate", rate, perPair, least)
		if perPair > 1.2 {
			t.Errorf("rate %v: %.3f calls a pair and second, want at most 1.2 (a renewal a period of 1 s)", rate, perPair)
		}
		if least < 0.9 {
			t.Errorf("rate %v: the least tenant admitted %.3f of its rate in the steady state, want >= 0.9", rate, least)
		}
	}
}
