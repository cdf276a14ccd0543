package syncer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// nodeStore is a lease.Store on two nodes, "live" and "dead", and a
// syncer.NodeLocator: a tenant named "dead-..." lives on the dead node,
// every other on the live one, and the quota version lives on the dead
// node too (on a Redis Cluster it is a key of one node). Calls to the dead
// node hang until unblock is closed (or their context ends), like calls
// to a Redis master that was killed or paused; calls to the live node go
// to the in-process store at once.
type nodeStore struct {
	lease.Store
	unblock chan struct{}

	mu       sync.Mutex     // guards the fields below
	deadRuns int            // calls to the dead node so far
	mixed    []string       // calls that mixed the nodes' tenants
	hanging  int            // calls to the dead node hanging now
	located  map[string]int // NodeOf calls by tenant
}

func nodeOf(tenant string) string {
	if strings.HasPrefix(tenant, "dead-") {
		return "dead"
	}
	return "live"
}

func (s *nodeStore) NodeOf(_ context.Context, tenant string) (string, bool) {
	s.mu.Lock()
	if s.located == nil {
		s.located = map[string]int{}
	}
	s.located[tenant]++
	s.mu.Unlock()
	return nodeOf(tenant), true
}

// locatedTimes returns how many times NodeOf was asked about tenant: a
// round in Cluster mode asks once for each tenant it calls for.
func (s *nodeStore) locatedTimes(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.located[tenant]
}

// toNode is the node a call for tenants goes to; a call that mixes the
// nodes' tenants is recorded and goes to the dead node (as go-redis would
// keep it waiting).
func (s *nodeStore) toNode(tenants []string) string {
	node := nodeOf(tenants[0])
	for _, t := range tenants[1:] {
		if nodeOf(t) != node {
			s.mu.Lock()
			s.mixed = append(s.mixed, strings.Join(tenants, ","))
			s.mu.Unlock()
			return "dead"
		}
	}
	return node
}

// hang blocks a call to the dead node until unblock or ctx.
func (s *nodeStore) hang(ctx context.Context) error {
	s.mu.Lock()
	s.deadRuns++
	s.hanging++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.hanging--
		s.mu.Unlock()
	}()
	select {
	case <-s.unblock:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *nodeStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	tenants := make([]string, len(reqs))
	for i, r := range reqs {
		tenants[i] = r.Tenant
	}
	if s.toNode(tenants) == "dead" {
		if err := s.hang(ctx); err != nil {
			res := make([]lease.Result, len(reqs))
			for i := range res {
				res[i].Err = err
			}
			return res, err
		}
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

func (s *nodeStore) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	tenants := make([]string, len(reqs))
	for i, r := range reqs {
		tenants[i] = r.Tenant
	}
	if s.toNode(tenants) == "dead" {
		if err := s.hang(ctx); err != nil {
			res := make([]lease.ReleaseResult, len(reqs))
			for i := range res {
				res[i].Err = err
			}
			return res
		}
	}
	return s.Store.ReleaseMany(ctx, reqs)
}

func (s *nodeStore) QuotaVersion(ctx context.Context) (int64, error) {
	if err := s.hang(ctx); err != nil {
		return 0, err
	}
	return s.Store.QuotaVersion(ctx)
}

func (s *nodeStore) counts() (deadRuns, hanging int, mixed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadRuns, s.hanging, append([]string(nil), s.mixed...)
}

// within polls cond until it holds or the deadline passes, and reports
// whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // polling interval; the deadline bounds the wait
	}
	return true
}

// fakeClock is a clock the test moves (Add) and the in-process store of
// one instance, "me", that reads it.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// clockedSyncer returns a syncer on clockedView's view and clock: a
// refresh interval of 100 ms, calls of up to 10 s, an idle timeout of an
// hour, and Options.MaxTenants maxTenants (0: no cap). The caller closes
// it (before goleak's check).
func clockedSyncer(t *testing.T, maxTenants int) (*fakeClock, *syncer.Syncer) {
	t.Helper()
	clock, view := clockedView(t)
	return clock, syncer.New(view, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		CallTimeout: 10 * time.Second,
		IdleTimeout: time.Hour,
		MaxTenants:  maxTenants,
	})
}

func clockedView(t *testing.T) (*fakeClock, lease.Store) {
	t.Helper()
	c := &fakeClock{}
	c.ns.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	view, err := memstore.New(memstore.WithClock(c.Now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c, view
}

// TestClusterDeadNodeDelaysOnlyItsTenants drives a Cluster-mode syncer by
// hand (Tick, Wait) on a store whose dead node's calls hang, the quota
// version's among them: each Tick must return while those calls hang, the
// live node's tenants must get their leases and be refreshed round after
// round, the dead node's tenants must stay out of later rounds (locked,
// one call in flight; a tenant of the node that comes later waits its
// turn) and get their leases once the node answers; Wait
// and Close wait for the hanging calls, so no goroutine outlives them.
//
// Before the syncer kept nodes apart, the first Tick hung with the dead
// node's call (and with its quota version poll before that).
func TestClusterDeadNodeDelaysOnlyItsTenants(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	now := clock.Now
	st := &nodeStore{Store: view, unblock: make(chan struct{})}
	unblocked := false
	unblock := func() {
		if !unblocked {
			unblocked = true
			close(st.unblock)
		}
	}

	const interval = 100 * time.Millisecond
	s := syncer.New(st, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
		Now:     now,
		Cluster: true,
		// Long enough never to end on its own: the dead node's calls end
		// when the test unblocks them.
		CallTimeout: time.Hour,
	})
	defer s.Close()
	defer unblock() // first: Close waits for the hanging calls
	lim := quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	var live, dead []*syncer.Tenant
	for i := range 4 {
		for _, name := range []string{"live-" + string(rune('a'+i)), "dead-" + string(rune('a'+i))} {
			tn, err := s.Track(name, lim)
			if err != nil {
				t.Fatal(err)
			}
			tn.NoteMiss(10)
			if nodeOf(name) == "dead" {
				dead = append(dead, tn)
			} else {
				live = append(live, tn)
			}
		}
	}
	ctx := context.Background()

	// tick runs s.Tick and fails the test when it does not return in
	// time: it would be waiting for the dead node.
	tick := func(what string) bool {
		t.Helper()
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			s.Tick(ctx)
		}()
		select {
		case <-returned:
			return true
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Tick did not return within 10s while the dead node's calls hang", what)
			unblock()
			<-returned
			return false
		}
	}
	allLeased := func(ts []*syncer.Tenant) func() bool {
		return func() bool {
			for _, tn := range ts {
				if tn.Held() == 0 {
					return false
				}
			}
			return true
		}
	}

	if !tick("first round") {
		return
	}
	if !within(10*time.Second, allLeased(live)) {
		t.Fatalf("the live node's tenants got no lease while the dead node's call hangs")
	}
	// The dead node's acquire (and the quota version poll) hang.
	if !within(10*time.Second, func() bool { _, hanging, _ := st.counts(); return hanging >= 2 }) {
		runs, hanging, _ := st.counts()
		t.Fatalf("%d calls to the dead node made, %d hanging; want the acquire and the quota version poll", runs, hanging)
	}
	for _, tn := range dead {
		if tn.Held() != 0 {
			t.Errorf("%s holds %d tokens while its node hangs", tn.Name(), tn.Held())
		}
	}

	// A tenant of the dead node that comes later waits behind the call in
	// flight there (one round's calls per node at a time), without a call
	// of its own.
	late, err := s.Track("dead-late", lim)
	if err != nil {
		t.Fatal(err)
	}
	late.NoteMiss(10)
	dead = append(dead, late)

	// Later rounds go on for the live tenants: spend their leases, move
	// the clock past their refresh and tick again, a few times. A tenant
	// whose previous call is still being applied is skipped (locked) and
	// picked up by the next tick: tick until all are refilled.
	calls := s.Stats().Calls
	for r := range 5 {
		for _, tn := range live {
			for ok := true; ok; ok, _ = tn.Spend(1) {
			}
			tn.NoteMiss(10)
		}
		clock.Add(interval)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if !tick("a later round") {
				return
			}
			if within(20*time.Millisecond, allLeased(live)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the live node's tenants were not refilled within 10s while the dead node's call hangs", r+2)
			}
		}
	}
	if got := s.Stats().Calls - calls; got < 5 {
		t.Errorf("%d lease calls in 5 later rounds, want one per round at least", got)
	}
	// The dead node's tenants stayed locked: no second acquire, no second
	// poll of the quota version; the late tenant's acquire waits its turn.
	if runs, hanging, _ := st.counts(); runs != 2 || hanging != 2 {
		t.Errorf("calls to the dead node: %d made, %d hanging; want 2 and 2 (one acquire, one quota version poll)", runs, hanging)
	}
	if _, _, mixed := st.counts(); len(mixed) > 0 {
		t.Errorf("calls mixed the nodes' tenants: %q", mixed)
	}

	// The node answers: its tenants get their leases, and Wait returns
	// once the calls are done.
	unblock()
	s.Wait()
	if !allLeased(dead)() {
		for _, tn := range dead {
			t.Errorf("%s holds %d tokens after its node answered", tn.Name(), tn.Held())
		}
	}
	s.Close()
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tn := range append(live, dead...) {
		if tn.Held() != 0 {
			t.Errorf("%s holds %d tokens after ReleaseAll", tn.Name(), tn.Held())
		}
	}
}

// TestStandaloneRoundFinishesItsCalls checks that without Cluster a Tick
// still returns only once its lease calls are done, even on a Store that
// tells nodes apart: a slow node's calls take 30ms here, and when Tick
// returns every tenant must hold its lease. The poll of the quota version
// (on the slow node too) runs beside the rounds, and Wait waits for it:
// then none may be in flight.
func TestStandaloneRoundFinishesItsCalls(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	now := clock.Now
	st := &nodeStore{Store: view, unblock: make(chan struct{})}
	s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{}, 1), Now: now, CallTimeout: time.Hour})
	defer s.Close()
	lim := quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	var ts []*syncer.Tenant
	for _, name := range []string{"live-a", "live-b", "dead-a", "dead-b"} {
		tn, err := s.Track(name, lim)
		if err != nil {
			t.Fatal(err)
		}
		tn.NoteMiss(10)
		ts = append(ts, tn)
	}
	slow := time.AfterFunc(30*time.Millisecond, func() { close(st.unblock) }) // the slow node's latency
	defer slow.Stop()
	s.Tick(context.Background())
	for _, tn := range ts {
		if tn.Held() == 0 {
			t.Errorf("%s holds no lease when Tick returned", tn.Name())
		}
	}
	s.Wait()
	if runs, hanging, _ := st.counts(); runs == 0 || hanging != 0 {
		t.Errorf("after Tick and Wait: %d calls to the slow node, %d still in flight; want some, none in flight", runs, hanging)
	}
}

// TestClusterRunEndDropsWaitingCalls runs a Cluster-mode syncer (Run) on a
// store whose dead node's calls hang, and ends Run while a tenant's call
// waits behind the node's call in flight: Run must return once the call in
// flight is done, without making the waiting one (nothing was sent, so
// nothing granted is lost), and leave that tenant unlocked and its tokens
// to ReleaseAll.
func TestClusterRunEndDropsWaitingCalls(t *testing.T) {
	defer goleak.VerifyNone(t)
	mem := memstore.New()
	view, err := mem.Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st := &nodeStore{Store: view, unblock: make(chan struct{})}
	var once sync.Once
	unblock := func() { once.Do(func() { close(st.unblock) }) }
	s := syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 40 * time.Millisecond}, 1),
		Cluster:     true,
		CallTimeout: time.Hour, // the dead node's calls end when the test unblocks them
	})
	defer s.Close()
	defer unblock() // first: Close waits for the hanging calls
	lim := quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	first, err := s.Track("dead-first", lim)
	if err != nil {
		t.Fatal(err)
	}
	first.NoteMiss(10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	// The first tenant's acquire and the quota version poll hang.
	if !within(10*time.Second, func() bool { _, hanging, _ := st.counts(); return hanging >= 2 }) {
		runs, hanging, _ := st.counts()
		cancel()
		unblock()
		<-ran
		t.Fatalf("%d calls to the dead node, %d hanging; want the acquire and the quota version poll hanging", runs, hanging)
	}
	// A second tenant of the node: a round plans its call (and asks its
	// node), which waits for the first call.
	second, err := s.Track("dead-second", lim)
	if err != nil {
		t.Fatal(err)
	}
	second.NoteMiss(10)
	if !within(10*time.Second, func() bool { return st.locatedTimes("dead-second") > 0 }) {
		t.Errorf("no round called for the second tenant")
	}
	cancel()
	unblock()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its end and the node answering")
	}
	if runs, _, _ := st.counts(); runs != 2 {
		t.Errorf("%d calls to the dead node; want 2 (the first acquire, the quota version poll): the waiting call was made after Run ended", runs)
	}
	if first.Held() == 0 {
		t.Errorf("the first tenant holds no lease: the call in flight when Run ended was not applied")
	}
	if n := second.Held(); n != 0 {
		t.Errorf("the second tenant holds %d tokens: its call was made after Run ended", n)
	}
	// Its lock is free: an urgent refill goes through.
	select {
	case r := <-s.Refill(context.Background(), second, 1):
		if r.Err != nil {
			t.Errorf("refill of the second tenant: %v", r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second tenant's lock is still held after Run returned")
	}
	s.Close()
	if err := s.ReleaseAll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// slowNodeStore is a lease.Store on nodes named by the tenant's first
// letter ("a-1" lives on "a"), and a syncer.NodeLocator: a call to a node
// set slow waits until its deadline, as a call to a live master does when
// the process is too short of CPU to read its reply.
type slowNodeStore struct {
	lease.Store
	mu   sync.Mutex
	slow map[string]bool
}

func (s *slowNodeStore) NodeOf(_ context.Context, tenant string) (string, bool) {
	return tenant[:1], true
}

func (s *slowNodeStore) setSlow(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow[node] = true
}

func (s *slowNodeStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	s.mu.Lock()
	slow := s.slow[reqs[0].Tenant[:1]]
	s.mu.Unlock()
	if slow {
		<-ctx.Done() // the call's deadline: CallTimeout
		res := make([]lease.Result, len(reqs))
		for i := range res {
			res[i].Err = ctx.Err()
		}
		return res, ctx.Err()
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

// TestClusterTimeoutOnAnsweringNodeIsBusy: on a Redis Cluster, a call that
// times out on a node that answered this instance within the default
// lease TTL is that node busy, as on one Redis: its tenant backs off but
// is not failing (no failure mode decides for it). A timeout on a node
// that never answered, or not for a lease TTL, is a failure.
func TestClusterTimeoutOnAnsweringNodeIsBusy(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	now := clock.Now
	st := &slowNodeStore{Store: view, slow: map[string]bool{}}
	s := syncer.New(st, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:     now,
		Cluster: true,
		// Short, as a slow node's calls last that long, but wide of what
		// an answering node's in-process call takes on a loaded machine.
		CallTimeout: 250 * time.Millisecond,
	})
	defer s.Close()
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	a1, a2, b1 := track("a-1"), track("a-2"), track("b-1")
	// The default lease TTL here is 200 ms (twice the interval).
	refill := func(after time.Duration, tn *syncer.Tenant) {
		t.Helper()
		clock.Add(after)
		<-s.Refill(context.Background(), tn, 1)
	}

	refill(0, a1)
	if a1.Held() == 0 || a1.Failing() {
		t.Fatalf("a-1: held %d, failing %v after node a answered", a1.Held(), a1.Failing())
	}
	st.setSlow("a")
	st.setSlow("b")
	refill(50*time.Millisecond, a2)
	if a2.Held() != 0 {
		t.Fatalf("a-2 holds %d tokens from a slow node", a2.Held())
	}
	if a2.Failing() {
		t.Error("a-2 is failing after a timeout on node a, which answered a-1's call 50 ms before: want busy, not failing")
	}
	refill(0, b1)
	if !b1.Failing() {
		t.Error("b-1 is not failing after a timeout on node b, which never answered")
	}
	// Node a has not answered for over a lease TTL now (and a-2's backoff,
	// at most the interval, is over): its timeouts count again.
	refill(time.Second, a2)
	if !a2.Failing() {
		t.Error("a-2 is not failing after node a answered nothing for two lease TTLs")
	}
}

// tracker returns a function that tracks a tenant of lim on s by name.
func tracker(t *testing.T, s *syncer.Syncer, lim quota.Quota) func(name string) *syncer.Tenant {
	return func(name string) *syncer.Tenant {
		t.Helper()
		tn, err := s.Track(name, lim)
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
}

// lateNodeStore is a lease.Store on nodes named by the tenant's first
// letter, and a syncer.NodeLocator: a call to a node set late moves the
// test's clock on by its delay before it answers (a busy master's reply
// that comes late), and one to a node set to time out fails at once with
// the deadline's error, as a call to a master that does not answer.
type lateNodeStore struct {
	lease.Store
	clock *fakeClock
	mu    sync.Mutex
	late  map[string]time.Duration // guarded by mu
	out   map[string]bool          // guarded by mu
}

func (s *lateNodeStore) NodeOf(_ context.Context, tenant string) (string, bool) {
	return tenant[:1], true
}

func (s *lateNodeStore) set(node string, late time.Duration, out bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.late[node], s.out[node] = late, out
}

func (s *lateNodeStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	s.mu.Lock()
	node := reqs[0].Tenant[:1]
	late, out := s.late[node], s.out[node]
	s.mu.Unlock()
	if out {
		res := make([]lease.Result, len(reqs))
		for i := range res {
			res[i].Err = context.DeadlineExceeded
		}
		return res, context.DeadlineExceeded
	}
	s.clock.Add(late)
	return s.Store.AcquireMany(ctx, reqs, results)
}

// TestClusterBusyNodeCutsOnlyItsWindow: on a Redis Cluster each master has
// a call budget of its own. Replies from node a that come late cut a's
// window, and in the next round a's tenants beyond it wait (Skipped) while
// every tenant of node b gets its call: before, Cluster mode cut no window
// at all, and one window for the instance would have held b's tenants
// back for a's delays. A timeout on a node that never answered (down, not
// busy: no circuit breaker undoes its cuts in Cluster mode) cuts nothing;
// one on a node that answered lately does.
func TestClusterBusyNodeCutsOnlyItsWindow(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	st := &lateNodeStore{Store: view, clock: clock, late: map[string]time.Duration{}, out: map[string]bool{}}
	s := syncer.New(st, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:     clock.Now,
		Cluster: true,
		// Wide of what an in-process call takes on a loaded machine; the
		// delays that count are the test clock's.
		CallTimeout: 10 * time.Second,
		// The window's floor is 256 commands over the fleet's instances: 8.
		Instances: 32,
	})
	defer s.Close()
	ctx := context.Background()
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	// The default lease TTL is 200 ms (twice the interval), so a reply
	// later than 50 ms is congestion (a quarter of it).
	st.set("a", 60*time.Millisecond, false)
	for i := range 6 {
		// Sent after the last cut: one cut per round trip.
		clock.Add(time.Millisecond)
		<-s.Refill(ctx, track(fmt.Sprintf("a-%d", i)), 1)
	}
	if got := s.Stats(); got.WindowCuts != 6 || got.CallWindow != 8 {
		t.Fatalf("after 6 late replies from node a: %d cuts, smallest window %d; want 6 and the floor, 8", got.WindowCuts, got.CallWindow)
	}

	// Node a answers at once again, within budgetCalm of its last cut, so
	// its window of 8 binds; node b's was never cut.
	st.set("a", 0, false)
	var as, bs []*syncer.Tenant
	for i := range 20 {
		as = append(as, track(fmt.Sprintf("a-new-%d", i)))
		bs = append(bs, track(fmt.Sprintf("b-%d", i)))
	}
	for _, tn := range append(as, bs...) {
		tn.NoteMiss(10)
	}
	skipped := s.Stats().HeldBack
	s.Tick(ctx)
	s.Wait()
	leased := func(ts []*syncer.Tenant) (n int) {
		for _, tn := range ts {
			if tn.Held() > 0 {
				n++
			}
		}
		return n
	}
	if n := leased(bs); n != len(bs) {
		t.Errorf("%d of node b's %d tenants leased in a round after node a's window was cut; want all", n, len(bs))
	}
	if n := leased(as); n == 0 || n > 8 {
		t.Errorf("%d of node a's 20 new tenants leased in that round; want 1 to 8, its window", n)
	}
	if n := s.Stats().HeldBack - skipped; n < 12 {
		t.Errorf("%d acquires skipped in that round; want at least the 12 of node a's tenants over its window", n)
	}

	// Node c has never answered: its timeout is an outage, not congestion.
	cuts := s.Stats().WindowCuts
	st.set("c", 0, true)
	<-s.Refill(ctx, track("c-0"), 1)
	if got := s.Stats().WindowCuts; got != cuts {
		t.Errorf("a timeout on node c, which never answered, made %d cuts; want none", got-cuts)
	}
	st.set("c", 0, false)
	<-s.Refill(ctx, track("c-1"), 1)
	st.set("c", 0, true)
	<-s.Refill(ctx, track("c-2"), 1)
	if got := s.Stats().WindowCuts; got != cuts+1 {
		t.Errorf("a timeout on node c right after it answered made %d cuts; want 1 (busy)", got-cuts)
	}
}
