package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// The cluster tests run each on a cluster of their own (3 masters, 3
// replicas, about 3.5 s to start) and one after the other: the machine
// they were tuned on has two cores, and the lower bounds on admissions
// need the CPU.

// errorTally is a client hook that counts the errors of the commands that
// reach the caller (after go-redis followed redirects and retried), by
// their first word: TRYAGAIN, MOVED, context deadline exceeded, ...
type errorTally struct {
	mu   sync.Mutex
	errs map[string]int
}

func (e *errorTally) DialHook(next redis.DialHook) redis.DialHook { return next }

func (e *errorTally) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		e.add(cmd)
		return err
	}
}

func (e *errorTally) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			e.add(cmd)
		}
		return err
	}
}

func (e *errorTally) add(cmd redis.Cmder) {
	err := cmd.Err()
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	kind := err.Error()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		kind, _, _ = strings.Cut(kind, " ") // MOVED, TRYAGAIN, NOSCRIPT, ...
	} else if i := strings.LastIndex(kind, ": "); i >= 0 {
		op, _, _ := strings.Cut(kind, " ") // "read tcp a->b: i/o timeout" is "read: i/o timeout"
		kind = op + ": " + kind[i+2:]
	}
	e.mu.Lock()
	if e.errs == nil {
		e.errs = map[string]int{}
	}
	e.errs[kind]++
	e.mu.Unlock()
}

// String lists the counts, most frequent first.
func (e *errorTally) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) == 0 {
		return "none"
	}
	keys := sortedKeys(e.errs)
	sort.SliceStable(keys, func(i, j int) bool { return e.errs[keys[i]] > e.errs[keys[j]] })
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s x%d", k, e.errs[k])
	}
	return b.String()
}

// clusterClient returns a ClusterClient of c for a limiter. The caller
// closes it.
func clusterClient(c *redistest.Cluster) *redis.ClusterClient {
	return redis.NewClusterClient(c.ClientOptions())
}

// maxReasons bounds leasequota.Reason values, for counting denials.
const maxReasons = 16

// demand asks limiters for tokens of named tenants at over times each
// tenant's rate, from goroutines that each use one limiter (goroutine g
// uses limiters[g % len]), and counts admissions and denials by reason.
type demand struct {
	names []string

	admitted  []atomic.Int64
	denied    [][maxReasons]atomic.Int64
	firstUnav []atomic.Int64 // unix nanoseconds of each tenant's first ReasonUnavailable denial
	lastUnav  []atomic.Int64 // and of its last
	decisions atomic.Int64

	stop atomic.Bool
	wg   sync.WaitGroup
}

// tenantNames returns n tenant names, "tenant-00", "tenant-01", ...,
// zero-padded to the width of n-1 (at least two digits).
func tenantNames(n int) []string {
	width := max(len(strconv.Itoa(n-1)), 2)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%0*d", width, i)
	}
	return names
}

// stepQuota returns the quota of tenant i: a rate of base + step*i
// tokens/s and a burst of burstSeconds' worth of it.
func stepQuota(base, step, burstSeconds float64) func(int) leasequota.Quota {
	return func(i int) leasequota.Quota {
		rate := base + step*float64(i)
		return leasequota.Quota{Rate: rate, Burst: int64(rate * burstSeconds)}
	}
}

// startDemand starts the goroutines; Stop ends them.
func startDemand(limiters []*leasequota.Limiter, names []string, quota func(int) leasequota.Quota, over float64, goroutines int) *demand {
	l := &demand{
		names:     names,
		admitted:  make([]atomic.Int64, len(names)),
		denied:    make([][maxReasons]atomic.Int64, len(names)),
		firstUnav: make([]atomic.Int64, len(names)),
		lastUnav:  make([]atomic.Int64, len(names)),
	}
	rates := make([]float64, len(names))
	for i := range names {
		rates[i] = quota(i).Rate
	}
	for g := 0; g < goroutines; g++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			lim := limiters[g%len(limiters)]
			ctx := context.Background()
			began := time.Now()
			sent := make([]int64, len(names))
			for !l.stop.Load() {
				el := time.Since(began).Seconds()
				for i, name := range names {
					due := int64(el * over * rates[i] / float64(goroutines))
					for ; sent[i] < due; sent[i]++ {
						l.decisions.Add(1)
						d := lim.AllowN(ctx, name, 1)
						if d.Allowed {
							l.admitted[i].Add(1)
							continue
						}
						l.denied[i][int(d.Reason)%maxReasons].Add(1)
						if d.Reason == leasequota.ReasonUnavailable {
							now := time.Now().UnixNano()
							l.firstUnav[i].CompareAndSwap(0, now)
							l.lastUnav[i].Store(now)
						}
					}
				}
				time.Sleep(5 * time.Millisecond) // pacing the load, not waiting for a condition
			}
		}()
	}
	return l
}

// waitRecovered polls, for up to timeout, until every tenant was admitted
// again since the call and no instance denied one as unavailable for
// 300ms, and returns when; after names the event recovered from, for the
// failure message.
func (l *demand) waitRecovered(t *testing.T, timeout time.Duration, after string) time.Time {
	t.Helper()
	from := l.snap()
	deadline := time.Now().Add(timeout)
	for {
		s := l.snap()
		waiting := 0
		quiet := time.Now().Add(-300 * time.Millisecond).UnixNano()
		for i := range l.names {
			if s[i].admitted == from[i].admitted || l.lastUnav[i].Load() > quiet {
				waiting++
			}
		}
		if waiting == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tenants still not admitted, or denied as unavailable, %v after %s", waiting, timeout, after)
		}
		time.Sleep(20 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
}

// Stop ends the demand and waits for its goroutines; it may be called
// again.
func (l *demand) Stop() {
	l.stop.Store(true)
	l.wg.Wait()
}

// tenantCounts is a snapshot of one tenant's admissions and denials.
type tenantCounts struct {
	admitted int64
	denied   [maxReasons]int64
}

func (c tenantCounts) sub(o tenantCounts) tenantCounts {
	c.admitted -= o.admitted
	for r := range c.denied {
		c.denied[r] -= o.denied[r]
	}
	return c
}

func (c tenantCounts) unavailable() int64 { return c.denied[leasequota.ReasonUnavailable] }

// snap returns every tenant's counts now.
func (l *demand) snap() []tenantCounts {
	s := make([]tenantCounts, len(l.names))
	for i := range s {
		s[i].admitted = l.admitted[i].Load()
		for r := range s[i].denied {
			s[i].denied[r] = l.denied[i][r].Load()
		}
	}
	return s
}

// redisClock returns the TIME of the Redis node c talks to.
func redisClock(t *testing.T, c redis.Cmdable) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// tenantsByMaster maps each tenant (by index) to the master that owns its
// bucket's slot, as masters say.
func tenantsByMaster(t *testing.T, masters []redistest.ClusterNode, prefix string, names []string) map[string][]int {
	t.Helper()
	by := map[string][]int{}
	for i, n := range names {
		slot := int(lease.Slot(lease.Key(prefix, n)))
		owner := ""
		for _, m := range masters {
			if m.Owns(slot) {
				owner = m.Addr
			}
		}
		if owner == "" {
			t.Fatalf("no master owns slot %d of tenant %s", slot, n)
		}
		by[owner] = append(by[owner], i)
	}
	return by
}

// newLimiterSet returns n limiters, each on its own client from newClient,
// with the given quotas, and a function that closes the limiters (giving
// their tokens back) and then the clients. Defer it after the leak check.
//
// timeout is the Redis call deadline (WithRedisTimeout), overridden by
// LEASEQUOTA_REDIS_TIMEOUT; 0 is the library's default (50ms). The tests
// set it above the default: -race and six redis-servers on two cores
// shared with other test processes miss a 50ms deadline now and then,
// and a missed deadline is a failed lease call.
func newLimiterSet[C redis.UniversalClient](t *testing.T, n int, newClient func() C, timeout time.Duration, prefix string, quota func(int) leasequota.Quota, names []string) ([]*leasequota.Limiter, func()) {
	t.Helper()
	index := map[string]int{}
	for i, name := range names {
		index[name] = i
	}
	limiters := make([]*leasequota.Limiter, 0, n)
	var clients []C
	closeAll := func() {
		for _, l := range limiters {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := l.Close(ctx); err != nil {
				t.Error(err)
			}
			cancel()
		}
		for _, c := range clients {
			c.Close()
		}
	}
	for i := 0; i < n; i++ {
		c := newClient()
		clients = append(clients, c)
		opts := []leasequota.Option{
			leasequota.WithLogger(redistest.Logger(t).With("limiter", i)),
			leasequota.WithKeyPrefix(prefix),
			leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quota(index[tenant]) }),
			// Only leased admissions are inside the bound.
			leasequota.WithFailureMode(leasequota.FailClosed),
			// A first request does not wait for its lease: the load
			// goroutines would otherwise take the first requests of their
			// tenants one after the other, creating the buckets over half
			// a second, and the bound counts refill from the start.
			leasequota.WithColdStartWait(0),
		}
		if d, err := time.ParseDuration(os.Getenv("LEASEQUOTA_REDIS_TIMEOUT")); err == nil {
			timeout = d
		}
		if timeout > 0 {
			opts = append(opts, leasequota.WithRedisTimeout(timeout))
		}
		l, err := leasequota.New(c, opts...)
		if err != nil {
			closeAll()
			t.Fatal(err)
		}
		limiters = append(limiters, l)
	}
	return limiters, closeAll
}

// scriptCallsOnNodes returns the EVAL and EVALSHA calls the nodes have served.
func scriptCallsOnNodes(t *testing.T, nodes []*redis.Client) int64 {
	t.Helper()
	var total int64
	for _, n := range nodes {
		total += scriptCalls(t, n)
	}
	return total
}

// sumInfoFields sums "field:value" numbers of INFO section over nodes.
func sumInfoFields(t testing.TB, nodes []*redis.Client, section string, fields ...string) float64 {
	t.Helper()
	var total float64
	for _, n := range nodes {
		info, err := n.Info(context.Background(), section).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			for _, f := range fields {
				if k == f {
					var x float64
					if _, err := fmt.Sscan(v, &x); err != nil {
						t.Fatalf("INFO %s %s=%q: %v", section, k, v, err)
					}
					total += x
				}
			}
		}
	}
	return total
}

// TestClusterGlobalBound is TestGlobalBound on a Redis Cluster: 4
// limiters, each with its own ClusterClient, on 200 tenants spread over
// the three masters, asking for twice each tenant's rate for 5 s. For
// every tenant the admitted count must stay within Burst + Rate*elapsed
// (Redis clock) and reach 90% of it.
//
// The demand (60,000 decisions/s in all) is sized so that -race, six
// redis-servers and the test fit on two cores with room to spare: when
// the syncers starve, leases come late and utilization, not the bound,
// suffers.
func TestClusterGlobalBound(t *testing.T) {
	c := redistest.StartCluster(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		instances  = 4
		tenants    = 200
		goroutines = 4
		overDemand = 2.0
	)
	duration := 5 * time.Second
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	// Rates from 50 to 249 tokens/s; bursts a second's worth, so that a
	// syncer stalled for a few hundred milliseconds (two shared cores)
	// finds the refill still in the bucket.
	quota := stepQuota(50, 1, 1)
	names := tenantNames(tenants)
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	byMaster := tenantsByMaster(t, masters, prefix, names)
	nodes := make([]*redis.Client, len(masters))
	for i, m := range masters {
		nodes[i] = c.NodeClient(m.Addr)
		if len(byMaster[m.Addr]) == 0 {
			t.Fatalf("master %s owns no tenant's slot", m.Addr)
		}
		t.Logf("master %s: %d slots, %d tenants", m.Addr, m.NumSlots(), len(byMaster[m.Addr]))
	}

	limiters, closeAll := newLimiterSet(t, instances, func() *redis.ClusterClient { return clusterClient(c) }, 250*time.Millisecond, prefix, quota, names)
	defer closeAll()

	callsBefore := scriptCallsOnNodes(t, nodes)
	start := redisClock(t, nodes[0])
	began := time.Now()
	ld := startDemand(limiters, names, quota, overDemand, goroutines)
	defer ld.Stop()      // before closeAll, when the test ends early
	time.Sleep(duration) // the length of the run, not a wait for a condition
	ld.Stop()
	end := redisClock(t, nodes[0])
	elapsed := end.Sub(start).Seconds()
	final := ld.snap()
	calls := scriptCallsOnNodes(t, nodes) - callsBefore
	// Where the rest of the bound went: tokens still in the buckets
	// (read before Close gives the leased ones back), and refill never
	// granted (mostly before each bucket's first acquire).
	left := bucketLevels(t, c, prefix, names, quota)
	var failed int64
	for _, l := range limiters {
		failed += l.Stats().Errors
	}
	closeAll()

	var worst, least float64 = 0, math.Inf(1)
	var leastName string
	for i := range names {
		q := quota(i)
		bound := float64(q.Burst) + q.Rate*elapsed
		got := float64(final[i].admitted)
		if got > bound {
			t.Errorf("%s: admitted %.0f > bound %.1f (burst %d + rate %.0f * %.3fs)", names[i], got, bound, q.Burst, q.Rate, elapsed)
		}
		if got < 0.9*bound {
			t.Errorf("%s: admitted %.0f < 90%% of bound %.1f", names[i], got, bound)
		}
		if u := final[i].unavailable(); u > 0 {
			// A call that missed its deadline: -race and other processes
			// on two cores can stall a pipeline. Fail-closed only lowers
			// admissions; the bounds above still apply.
			t.Logf("%s: %d denials with reason unavailable, the last %v after the start", names[i], u, time.Unix(0, ld.lastUnav[i].Load()).Sub(began).Round(time.Millisecond))
		}
		if got/bound < least {
			leastName = fmt.Sprintf("%s, rate %.0f", names[i], q.Rate)
		}
		worst, least = max(worst, got/bound), min(least, got/bound)
	}
	var admitted, bounds float64
	for i := range names {
		admitted += float64(final[i].admitted)
		bounds += float64(quota(i).Burst) + quota(i).Rate*elapsed
	}
	t.Logf("admitted/bound over %d tenants: min %.1f%% (%s), max %.1f%% (elapsed %.3fs); failed lease calls %d", tenants, 100*least, leastName, 100*worst, elapsed, failed)
	t.Logf("all tenants: bound %.0f, admitted %.0f (%.1f%%), left in the buckets at the end %.0f (%.1f%%), never granted otherwise %.0f (%.1f%%)",
		bounds, admitted, 100*admitted/bounds, left, 100*left/bounds, bounds-admitted-left, 100*(bounds-admitted-left)/bounds)

	// The buckets really are on all three masters.
	for i, m := range masters {
		var keys int
		iter := nodes[i].Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys++
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		if keys == 0 {
			t.Errorf("master %s holds no key under %s", m.Addr, prefix)
		}
		t.Logf("master %s holds %d keys", m.Addr, keys)
	}
	// Redis work grows with tenants and instances, not with decisions:
	// each instance refreshes each active tenant about once per refresh
	// interval (100ms), plus the refills its low watermark asks for.
	perK := float64(calls) / float64(ld.decisions.Load()) * 1000
	perInterval := float64(calls) / (instances * tenants * elapsed / leasequota.DefaultRefreshInterval.Seconds())
	t.Logf("script calls: %d for %d decisions (%.1f per 1,000); %.2f per tenant, instance and refresh interval",
		calls, ld.decisions.Load(), perK, perInterval)
	if perInterval > 2 {
		t.Errorf("%.2f script calls per tenant, instance and refresh interval, want <= 2", perInterval)
	}
}

// bucketLevels returns the tokens left in the tenants' global buckets,
// read with want-0 acquires (which refill and report, taking nothing).
func bucketLevels(t *testing.T, c *redistest.Cluster, prefix string, names []string, quota func(int) leasequota.Quota) float64 {
	t.Helper()
	cl := redis.NewClusterClient(c.ClientOptions())
	defer cl.Close()
	lc, err := lease.NewClient(cl, prefix)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]lease.Request, len(names))
	for i, n := range names {
		q := quota(i)
		reqs[i] = lease.Request{Tenant: n, Limits: lease.Limits{Rate: q.Rate, Burst: q.Burst}}
	}
	res, err := lc.AcquireMany(context.Background(), reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		total += r.Grant.Tokens
	}
	return total
}

// failoverRun is what a failover test measured.
type failoverRun struct {
	start, end                       time.Time // Redis clock, around the load
	kill, healed, settledAt, stopped time.Time // local clock
	settled, final                   []tenantCounts
}

// TestClusterFailover kills a master under load. Its tenants run out of
// leased tokens and are denied with ReasonUnavailable (the library is
// fail-closed) while its replica is promoted, then leasing resumes. The
// other masters' tenants must not notice: no unavailable denial, and
// their admissions within [90%, 100%] of their bound. The dead master's
// tenants must stay within their bound plus what asynchronous replication
// can lose (at most one burst, see FAILOVER-NOTES.md).
//
// The cluster runs with cluster-require-full-coverage no: with the Redis
// default every node answers CLUSTERDOWN from the moment the master is
// flagged failed until the replica took over (about a second here), and
// every tenant is degraded for that long; TestClusterFailoverFullCoverage
// measures that.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartClusterWith(t, redistest.ClusterConfig{PartialCoverage: true})
	runClusterFailover(t, c, true)
}

// TestClusterFailoverFullCoverage is TestClusterFailover with Redis's
// default cluster-require-full-coverage yes: all tenants may be denied
// with ReasonUnavailable while the cluster is down (between the master's
// FAIL flag and its replica's promotion), none after, and the bound holds
// for the tenants of the live masters.
func TestClusterFailoverFullCoverage(t *testing.T) {
	c := redistest.StartCluster(t)
	runClusterFailover(t, c, false)
}

// failoverTimeout is the Redis call deadline of the failover tests. Each
// syncer round waits for its slowest pipeline, and a dead master's
// pipeline takes up to the deadline (go-redis retries it with backoff),
// so a long deadline starves the live masters' tenants of timely leases
// (250ms: about 82% of their bound instead of 97%); see FAILOVER-NOTES.md.
const failoverTimeout = 100 * time.Millisecond

func runClusterFailover(t *testing.T, c *redistest.Cluster, partial bool) {
	// go-redis probes a node it cannot dial once a second in a goroutine
	// that sees the client closed only when it wakes up.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	const (
		instances  = 4
		tenants    = 60
		goroutines = 4
		overDemand = 2.0
	)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	quota := stepQuota(200, 10, 1) // bursts a second's worth, as in TestClusterGlobalBound
	names := tenantNames(tenants)
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byMaster := tenantsByMaster(t, masters, prefix, names)
	victim := masters[1]
	onVictim := map[int]bool{}
	for _, i := range byMaster[victim.Addr] {
		onVictim[i] = true
	}
	if len(onVictim) == 0 || len(onVictim) == tenants {
		t.Fatalf("%d of %d tenants on the victim master", len(onVictim), tenants)
	}
	survivor := c.NodeClient(masters[0].Addr)

	limiters, closeAll := newLimiterSet(t, instances, func() *redis.ClusterClient { return clusterClient(c) }, failoverTimeout, prefix, quota, names)
	defer closeAll()

	var run failoverRun
	run.start = redisClock(t, survivor)
	ld := startDemand(limiters, names, quota, overDemand, goroutines)
	defer ld.Stop()                     // before closeAll, when the test ends early
	time.Sleep(1500 * time.Millisecond) // warm-up under load, not a wait for a condition

	run.kill = time.Now()
	if err := c.KillNode(victim.Addr); err != nil {
		t.Fatal(err)
	}
	// While the master is dead: what does lease.AcquireMany do on a plain
	// ClusterClient (no workaround)? want 0 only reads the buckets.
	plainDeadNode(t, c, prefix, names, quota, onVictim)

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.WaitHealthy(wctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	run.healed = time.Now()
	t.Logf("master %s killed; cluster healthy again after %v", victim.Addr, run.healed.Sub(run.kill).Round(time.Millisecond))

	// Leasing resumes: wait (polling, with a deadline) until every tenant
	// was admitted again since the cluster healed and no instance denied
	// one with reason unavailable for 300ms. Tenants whose calls failed
	// for a while back off (up to a second, per instance) before calling
	// again.
	resumed := ld.waitRecovered(t, 10*time.Second, "the failover")
	t.Logf("every tenant admitted again, and none denied as unavailable for 300ms, %v after the cluster healed", resumed.Sub(run.healed).Round(time.Millisecond))
	run.settled, run.settledAt = ld.snap(), time.Now()
	time.Sleep(1500 * time.Millisecond) // the run after recovery, not a wait for a condition
	ld.Stop()
	run.stopped = time.Now()
	run.end = redisClock(t, survivor)
	run.final = ld.snap()
	closeAll()

	elapsed := run.end.Sub(run.start).Seconds()
	window := run.stopped.Sub(run.settledAt).Seconds()
	var (
		victimUnav, otherUnav, otherUnavAfter int64
		maxExcess, maxExcessBursts            float64
		minOther, minResumed                  = math.Inf(1), math.Inf(1)
		victimWin, otherWin                   unavWindow
	)
	for i := range names {
		q := quota(i)
		bound := float64(q.Burst) + q.Rate*elapsed
		got := float64(run.final[i].admitted)
		unav := run.final[i].unavailable()
		if onVictim[i] {
			victimUnav += unav
			victimWin.add(ld, i, run.kill)
			if unav == 0 {
				t.Errorf("%s (dead master): never denied with reason unavailable", names[i])
			}
			// Asynchronous replication may lose the last grants before
			// the kill: the promoted replica's bucket can hold up to what
			// was debited after its last update, at most one burst
			// (FAILOVER-NOTES.md).
			excess := got - bound
			maxExcess = max(maxExcess, excess)
			maxExcessBursts = max(maxExcessBursts, excess/float64(q.Burst))
			if excess > float64(q.Burst) {
				t.Errorf("%s (dead master): admitted %.0f > bound %.1f + one burst %d", names[i], got, bound, q.Burst)
			}
			// Once leasing resumed the tenant gets its rate again.
			share := float64(run.final[i].sub(run.settled[i]).admitted) / (q.Rate * window)
			minResumed = min(minResumed, share)
			if share < 0.8 {
				t.Errorf("%s (dead master): admitted %.0f%% of its rate after recovery, want >= 80%%", names[i], 100*share)
			}
			continue
		}
		otherUnav += unav
		otherUnavAfter += run.final[i].sub(run.settled[i]).unavailable()
		otherWin.add(ld, i, run.kill)
		if got > bound {
			t.Errorf("%s (live master): admitted %.0f > bound %.1f", names[i], got, bound)
		}
		if partial {
			if unav > 0 {
				t.Errorf("%s (live master): %d denials with reason unavailable", names[i], unav)
			}
			if got < 0.9*bound {
				t.Errorf("%s (live master): admitted %.0f < 90%% of bound %.1f", names[i], got, bound)
			}
		}
		minOther = min(minOther, got/bound)
	}
	if otherUnavAfter > 0 {
		t.Errorf("%d unavailable denials of live masters' tenants after recovery", otherUnavAfter)
	}
	healed := run.healed.Sub(run.kill)
	t.Logf("dead master's %d tenants: %d unavailable denials, %s (cluster healed at +%v); "+
		"after recovery admitted >= %.0f%% of rate; max excess over bound %.1f tokens (%.2f bursts)",
		len(onVictim), victimUnav, victimWin, healed.Round(time.Millisecond), 100*minResumed, maxExcess, maxExcessBursts)
	t.Logf("live masters' %d tenants: %d unavailable denials, %s; admitted >= %.1f%% of bound (elapsed %.3fs)",
		tenants-len(onVictim), otherUnav, otherWin, 100*minOther, elapsed)
}

// unavWindow spans tenants' unavailable denials, relative to a start.
type unavWindow struct {
	n                       int
	firstMin, firstMax, end time.Duration
}

func (w *unavWindow) add(ld *demand, i int, from time.Time) {
	first, last := ld.firstUnav[i].Load(), ld.lastUnav[i].Load()
	if first == 0 {
		return
	}
	f, l := time.Unix(0, first).Sub(from), time.Unix(0, last).Sub(from)
	if w.n == 0 || f < w.firstMin {
		w.firstMin = f
	}
	w.firstMax, w.end = max(w.firstMax, f), max(w.end, l)
	w.n++
}

func (w unavWindow) String() string {
	if w.n == 0 {
		return "none denied"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%d denied from +%v..+%v after the kill until +%v", w.n, r(w.firstMin), r(w.firstMax), r(w.end))
}

// plainDeadNode runs lease.AcquireMany (want 0: reads, debits nothing)
// for every tenant, with its quota, through a plain ClusterClient while a
// master is dead,
// with the limiter's default call deadline (50 ms), and reports how many
// tenants of the live masters failed: lease must keep them apart (one
// pipeline per master).
func plainDeadNode(t *testing.T, c *redistest.Cluster, prefix string, names []string, quota func(int) leasequota.Quota, onVictim map[int]bool) {
	t.Helper()
	cl := redis.NewClusterClient(c.ClientOptions())
	defer cl.Close()
	lc, err := lease.NewClient(cl, prefix)
	if err != nil {
		t.Fatal(err)
	}
	// With the tenants' own limits: the script stores the bucket with the
	// limits it is given, and a burst of 1 would cap the live tenants'
	// buckets at one token.
	reqs := make([]lease.Request, len(names))
	for i, n := range names {
		q := quota(i)
		reqs[i] = lease.Request{Tenant: n, Limits: lease.Limits{Rate: q.Rate, Burst: q.Burst}, Want: 0}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	res, err := lc.AcquireMany(ctx, reqs, nil)
	cancel()
	var victimErrs, otherErrs int
	kinds := map[string]int{}
	for i, r := range res {
		if r.Err == nil {
			continue
		}
		if onVictim[i] {
			victimErrs++
		} else {
			otherErrs++
		}
		kinds[r.Err.Error()]++
	}
	t.Logf("lease.AcquireMany on a plain ClusterClient, master dead: %d/%d of its tenants failed, %d/%d of the others; AcquireMany error: %v; errors: %v",
		victimErrs, len(onVictim), otherErrs, len(names)-len(onVictim), err, kinds)
	// Not asserted: lease sends one pipeline per master, which usually
	// keeps live masters' tenants apart (0 of 41 failed in most runs), but
	// go-redis's cluster pipeline can still stall on cluster state while
	// the dead node's connections time out, and with a 50ms deadline on a
	// loaded machine a whole round can fail. The limiter-level assertions
	// of TestClusterFailover (no unavailable denial on live masters) are
	// what users see.
	if otherErrs > 0 {
		t.Logf("a dead master failed %d acquires of tenants on live masters", otherErrs)
	}
}

// TestClusterReshard moves 1,500 slots holding live tenants from one
// master to another with redis-cli --cluster reshard while 4 limiters
// serve them. go-redis follows the ASK and MOVED redirects; no lease call
// may fail except with TRYAGAIN (a known issue, see below), no decision
// may be unavailable except after one, and every tenant stays within
// [90%, 100%] of its bound.
func TestClusterReshard(t *testing.T) {
	c := redistest.StartCluster(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		instances  = 4
		moving     = 60 // tenants in the slots that move
		staying    = 30
		slots      = 1500
		goroutines = 4
		overDemand = 2.0
	)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from, to := masters[0], masters[2]
	// redis-cli moves the source's lowest slots first.
	first := from.Slots[0].Start
	if from.Slots[0].End-first+1 < slots {
		t.Fatalf("source's first range %v is shorter than %d slots", from.Slots[0], slots)
	}
	var names []string
	moves := map[int]bool{}
	for i := 0; len(names) < moving+staying; i++ {
		name := fmt.Sprintf("tenant-%d", i)
		slot := int(lease.Slot(lease.Key(prefix, name)))
		inRange := slot >= first && slot < first+slots
		switch {
		case inRange && len(moves) < moving:
			moves[len(names)] = true
		case !inRange && len(names)-len(moves) < staying:
		default:
			continue
		}
		names = append(names, name)
	}
	quota := stepQuota(200, 10, 1) // bursts a second's worth, as in TestClusterGlobalBound
	tally := &errorTally{}
	limiters, closeAll := newLimiterSet(t, instances, func() *redis.ClusterClient {
		cl := clusterClient(c)
		cl.AddHook(tally)
		return cl
	}, 250*time.Millisecond, prefix, quota, names)
	defer closeAll()
	toNode := c.NodeClient(to.Addr)
	keysBefore, err := toNode.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}

	start := redisClock(t, toNode)
	ld := startDemand(limiters, names, quota, overDemand, goroutines)
	defer ld.Stop()         // before closeAll, when the test ends early
	time.Sleep(time.Second) // warm-up under load, not a wait for a condition
	began := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.Reshard(rctx, from.ID, to.ID, slots)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	time.Sleep(time.Second) // the run after the move, not a wait for a condition
	ld.Stop()
	end := redisClock(t, toNode)
	final := ld.snap()
	var stats leasequota.Stats
	for _, l := range limiters {
		s := l.Stats()
		stats.Calls += s.Calls
		stats.Errors += s.Errors
	}
	closeAll()

	keysAfter, err := toNode.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if keysAfter <= keysBefore {
		t.Errorf("target master holds %d keys after the move, %d before: nothing moved", keysAfter, keysBefore)
	}
	elapsed := end.Sub(start).Seconds()
	var unav int64
	least := math.Inf(1)
	for i := range names {
		q := quota(i)
		bound := float64(q.Burst) + q.Rate*elapsed
		got := float64(final[i].admitted)
		if got > bound {
			t.Errorf("%s: admitted %.0f > bound %.1f", names[i], got, bound)
		}
		if got < 0.9*bound {
			t.Errorf("%s (moved %v): admitted %.0f < 90%% of bound %.1f", names[i], moves[i], got, bound)
		}
		unav += final[i].unavailable()
		least = min(least, got/bound)
	}
	t.Logf("resharded %d slots (%d live tenants) in %v under load; lease calls %d, failed %d; errors that reached lease: %v; unavailable denials %d; admitted >= %.1f%% of bound",
		slots, moving, took.Round(time.Millisecond), stats.Calls, stats.Errors, tally, unav, 100*least)
	// go-redis follows MOVED and ASK; lease re-sends after NOSCRIPT (the
	// target master had not run the script yet). No other error may reach
	// the limiters, except TRYAGAIN: the acquire script takes several keys
	// of the tenant's slot (bucket, instance registry, quota override) and
	// Redis refuses a multi-key command on a slot being migrated when some
	// of its keys exist and some do not (the override usually does not).
	// The script did not run then; lease does not re-send it yet (see the
	// report of issue 6), so the tenant's call fails and the tenant may be
	// denied as unavailable until its backoff ends.
	tally.mu.Lock()
	tryAgain := tally.errs["TRYAGAIN"]
	for kind, n := range tally.errs {
		if kind != "NOSCRIPT" && kind != "TRYAGAIN" {
			t.Errorf("%d x %q reached the limiters during the reshard", n, kind)
		}
	}
	tally.mu.Unlock()
	switch {
	case tryAgain > 0:
		t.Logf("KNOWN ISSUE: %d script replies were TRYAGAIN (multi-key script on a migrating slot); %d lease calls failed, %d unavailable denials", tryAgain, stats.Errors, unav)
	case stats.Errors > 0 || unav > 0:
		t.Errorf("%d lease calls failed and %d decisions were unavailable during the reshard, without TRYAGAIN", stats.Errors, unav)
	}
}

// sortedKeys is for stable logs.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
