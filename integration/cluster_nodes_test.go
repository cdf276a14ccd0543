package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// acquireCadence returns how often, on average, each limiter made a lease
// acquire call for any of tenants in [from, to): the mean interval between
// two such calls of one limiter that both began in the window, and how
// many intervals that is. A zero from or to leaves that side open.
//
// A syncer round makes one acquire call per master for the tenants due
// on it (they spread over the refresh interval, so some are due at every
// tick): for the tenants of one master the cadence is the pace of the
// rounds that reach it.
func acquireCadence(tr *leaseTrace, tenants []int, from, to time.Time) (time.Duration, int) {
	on := map[int]bool{}
	for _, i := range tenants {
		on[i] = true
	}
	tr.mu.Lock()
	calls := slices.Clone(tr.calls)
	clients := tr.clients
	tr.mu.Unlock()
	sort.Slice(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
	last := make([]time.Time, clients)
	var sum time.Duration
	n := 0
	for _, c := range calls {
		if c.cmds[0].release || !on[c.cmds[0].tenant] {
			continue
		}
		if !from.IsZero() && c.at.Before(from) || !to.IsZero() && !c.at.Before(to) {
			continue
		}
		if prev := last[c.client]; !prev.IsZero() {
			sum += c.at.Sub(prev)
			n++
		}
		last[c.client] = c.at
	}
	if n == 0 {
		return 0, 0
	}
	return (sum / time.Duration(n)).Round(time.Millisecond), n
}

// pausedTimeout is the Redis call deadline of
// TestClusterPausedMasterDelaysOnlyItsTenants: ten ticks, so that a round
// that waited for the paused master's calls would be plain to see.
const pausedTimeout = 250 * time.Millisecond

// TestClusterPausedMasterDelaysOnlyItsTenants pauses one of three masters
// (CLIENT PAUSE ALL, for 3 s: it accepts connections and answers nothing,
// like a master that hangs, and is not failed over) while 4 limiters serve
// 60 tenants at twice their rate. Every lease call to it runs out of its
// deadline (250 ms). The other masters' tenants must not notice:
//
//   - each limiter keeps making lease calls for them as often as before
//     the pause (within a factor of two; measured on this machine before
//     the pause, so a busy machine slows both alike). A round that waited
//     for the paused master would make them once per deadline, ten ticks;
//   - none of them is denied as unavailable or cold start, except after a
//     lease call of its own ran out of its deadline on its live master
//     (the machine; checkFailures tells), or, for a cold start, after a
//     stall of this process (stallProbe.unexplained);
//   - they are admitted during the pause at the pace they were before it
//     (at least 80% of it).
//
// The paused master's tenants are denied as unavailable once their leases
// run out (the limiters are fail-closed), and lease again after the pause.
func TestClusterPausedMasterDelaysOnlyItsTenants(t *testing.T) {
	c := redistest.StartCluster(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		instances  = 4
		tenants    = 60
		goroutines = 4
		overDemand = 2.0
		pause      = 3 * time.Second
	)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	quota := stepQuota(200, 10, 1) // bursts a second's worth, as in TestClusterFailover
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
		t.Fatalf("%d of %d tenants on the paused master", len(onVictim), tenants)
	}
	live := func(i int) bool { return !onVictim[i] }
	checkNodeOf(t, c, prefix, names, masters)

	tr := newLeaseTrace(prefix, names)
	limiters, closeAll := newLimiterSet(t, instances, func() *redis.ClusterClient {
		cl := clusterClient(c)
		tr.attach(cl)
		return cl
	}, pausedTimeout, prefix, quota, names)
	defer closeAll()
	probe := startStallProbe()
	defer probe.Stop()

	ld := startDemand(limiters, names, quota, overDemand, goroutines)
	defer ld.Stop()                     // before closeAll, when the test ends early
	time.Sleep(1500 * time.Millisecond) // warm-up under load, not a wait for a condition

	warm, warmAt := ld.snap(), time.Now()
	time.Sleep(1500 * time.Millisecond) // the run before the pause, not a wait for a condition
	before, pausedAt := ld.snap(), time.Now()
	if err := c.NodeClient(victim.Addr).Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause) // the pause, not a wait for a condition
	during, resumedAt := ld.snap(), time.Now()
	time.Sleep(time.Second) // the run after the pause, not a wait for a condition
	ld.Stop()
	probe.Stop()
	final := ld.snap()
	closeAll()

	t.Log(probe)
	failed := checkFailures(t, tr, probe, pausedTimeout, live, []string{victim.Addr}, nil)
	checkUnavailable(t, ld, tr, failed, live)

	// The pace of the rounds, for each live master's tenants.
	for _, m := range masters {
		if m.Addr == victim.Addr {
			continue
		}
		b, nb := acquireCadence(tr, byMaster[m.Addr], warmAt, pausedAt)
		d, nd := acquireCadence(tr, byMaster[m.Addr], pausedAt, resumedAt)
		t.Logf("lease calls for live master %s's %d tenants, per limiter: every %v before the pause (%d intervals), every %v during it (%d)",
			m.Addr, len(byMaster[m.Addr]), b, nb, d, nd)
		if nb == 0 || nd == 0 {
			t.Errorf("live master %s: no lease calls to measure (%d intervals before the pause, %d during it)", m.Addr, nb, nd)
			continue
		}
		if d > 2*b {
			t.Errorf("live master %s's tenants were refreshed every %v while master %s was paused, every %v before: rounds waited for the paused master",
				m.Addr, d, victim.Addr, b)
		}
	}

	// What the live masters' tenants got, during the pause and before it.
	var (
		coldExplained                       int64
		unav, victimUnav                    int64
		admBefore, admDuring, admAfterPause int64
	)
	for i := range names {
		pre, in := before[i].sub(warm[i]), during[i].sub(before[i])
		if onVictim[i] {
			victimUnav += final[i].unavailable()
			continue
		}
		// A tenant whose own lease call ran out of its deadline while
		// this process stalled (failed, explained by the stall probe)
		// waited past its cold-start wait for the next: its cold-start
		// denials are the machine's, as its unavailable ones are
		// (checkUnavailable). Other tenants' are checked below.
		if failed[i] > 0 {
			coldExplained += final[i].sub(warm[i]).denied[leasequota.ReasonColdStart]
		}
		unav += final[i].unavailable()
		admBefore += pre.admitted
		admDuring += in.admitted
		admAfterPause += final[i].sub(during[i]).admitted
	}
	// A cold-start denial of a tenant none of whose lease calls failed
	// must follow a stall of this process (stallProbe.unexplained): the
	// load's goroutine stalled, the plan found no demand and kept no
	// lease (Tenant.Cold), or the refresh that would have ended it was
	// late. Beside two busy loops on 2026-12-07 this process ran 0.57
	// cores in 8.3 s (its worst stall 152 ms), and 75 such denials came.
	var coldAt []time.Time
	for _, c := range ld.coldDenials(warmAt, func(i int) bool { return live(i) && failed[i] == 0 }) {
		coldAt = append(coldAt, c.at)
	}
	coldUnexplained, coldWorst := probe.unexplained(coldAt)
	if len(coldAt) > 0 || coldExplained > 0 {
		t.Logf("live masters' tenants: %d denials as cold start after the warm-up of tenants whose lease calls ran out of their deadline while this process stalled; %d of tenants none of whose calls failed, %d of them after no stall of %v or more within %v (the longest stall before one: %v)",
			coldExplained, len(coldAt), coldUnexplained, stallExplainsLeast, stallExplainsWindow, coldWorst)
	}
	if coldUnexplained > 0 {
		t.Errorf("live masters' tenants: %d denials as cold start after the warm-up, of tenants none of whose lease calls failed, with this process running on time", coldUnexplained)
	}
	rateBefore := float64(admBefore) / pausedAt.Sub(warmAt).Seconds()
	rateDuring := float64(admDuring) / resumedAt.Sub(pausedAt).Seconds()
	rateAfter := float64(admAfterPause) / ld.stopped.Sub(resumedAt).Seconds()
	t.Logf("live masters' %d tenants: admitted %.0f/s before the pause, %.0f/s during it (%.0f%%), %.0f/s after it; %d unavailable denials in all (%d lease commands of theirs ran out of their deadline); "+
		"paused master's %d tenants: %d unavailable denials",
		tenants-len(onVictim), rateBefore, rateDuring, 100*rateDuring/rateBefore, rateAfter, unav, sumValues(failed), len(onVictim), victimUnav)
	// 80 % on a quiet machine; less on one that did not let this process
	// run (the probe's share of wall time it was not late), as the
	// pause's window can be starved more than the one before it.
	if floor := min(0.8, utilizationFloor(probe, 0.8)); rateDuring < floor*rateBefore {
		t.Errorf("live masters' tenants were admitted %.0f/s during the pause, %.0f/s before it: want at least %.0f%% (on what the machine delivered)",
			rateDuring, rateBefore, 100*floor)
	}
	if victimUnav == 0 {
		t.Errorf("the paused master's tenants were never denied as unavailable: was it paused?")
	}
}

// checkNodeOf checks that lease.Client.NodeOf names the master that owns
// each tenant's slot, as the masters say: the syncer groups its calls by
// it.
func checkNodeOf(t *testing.T, c *redistest.Cluster, prefix string, names []string, masters []redistest.ClusterNode) {
	t.Helper()
	cl := clusterClient(c)
	defer cl.Close()
	lc, err := lease.NewClient(cl, prefix)
	if err != nil {
		t.Fatal(err)
	}
	owners := tenantsByMaster(t, masters, prefix, names)
	var wrong []string
	for addr, idx := range owners {
		for _, i := range idx {
			if got, ok := lc.NodeOf(context.Background(), names[i]); !ok || got != addr {
				wrong = append(wrong, fmt.Sprintf("%s: %q, %v (want %s)", names[i], got, ok, addr))
			}
		}
	}
	if len(wrong) > 0 {
		t.Errorf("NodeOf disagrees with the masters for %d tenants: %v", len(wrong), wrong)
	}
}
