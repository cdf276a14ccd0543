package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/lease"
)

// leaseTrace records every lease script call the limiters' ClusterClients
// make (attach it to each): the pipeline lease sent (one per master and
// round) with what was left of its deadline, each command's tenant,
// outcome and reply, and the round trips go-redis made to nodes for it,
// with their addresses. From it a test tells a call that missed its
// deadline on the node it went to (the machine) from one that failed
// because of another node, and rebuilds each tenant's global bucket from
// the replies (ledgers).
type leaseTrace struct {
	tenantOf map[string]int // bucket key -> tenant index

	mu      sync.Mutex
	clients int
	calls   []*tracedCall
}

// tracedCall is one pipeline (or single command) of lease scripts.
type tracedCall struct {
	client int       // index of the client, in attach order
	at     time.Time // when go-redis was handed the call
	took   time.Duration
	budget time.Duration // what was left of the ctx deadline at, 0 when none
	cmds   []tracedCmd

	mu    sync.Mutex // guards trips: go-redis makes them from its goroutines
	trips []nodeTrip
}

// tracedCmd is one script command of a call.
type tracedCmd struct {
	tenant  int
	release bool
	want    int64  // tokens an acquire asked for
	kind    string // errKind of its error, "" when it succeeded
	// From a reply: the tokens granted (acquire) or credited (release),
	// the bucket's tokens after the call, and the bucket's time of it.
	moved  float64
	tokens float64
	server time.Time
}

// nodeTrip is one round trip go-redis made to a node for a call.
type nodeTrip struct {
	addr     string
	at, took time.Duration // from the call's start
	kind     string        // errKind of the trip's error, "" when none
}

func newLeaseTrace(prefix string, names []string) *leaseTrace {
	tr := &leaseTrace{tenantOf: map[string]int{}}
	for i, n := range names {
		tr.tenantOf[lease.Key(prefix, n)] = i
	}
	return tr
}

// attach adds the trace's hooks to cl, which must not have made a call yet
// (node clients made before are not traced).
func (tr *leaseTrace) attach(cl *redis.ClusterClient) {
	tr.mu.Lock()
	client := tr.clients
	tr.clients++
	tr.mu.Unlock()
	cl.AddHook(clusterHook{tr, client})
	cl.OnNewNode(func(n *redis.Client) { n.AddHook(nodeHook{n.Options().Addr}) })
}

type callKey struct{}

// clusterHook traces the calls made through one ClusterClient.
type clusterHook struct {
	tr     *leaseTrace
	client int
}

func (h clusterHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h clusterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		cmds := []redis.Cmder{cmd}
		c := h.tr.begin(ctx, h.client, cmds)
		if c == nil {
			return next(ctx, cmd)
		}
		err := next(context.WithValue(ctx, callKey{}, c), cmd)
		h.tr.end(c, cmds)
		return err
	}
}

func (h clusterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c := h.tr.begin(ctx, h.client, cmds)
		if c == nil {
			return next(ctx, cmds)
		}
		err := next(context.WithValue(ctx, callKey{}, c), cmds)
		h.tr.end(c, cmds)
		return err
	}
}

// nodeHook records the round trips of traced calls to one node.
type nodeHook struct{ addr string }

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.record(ctx, start, err)
		return err
	}
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		if err == nil {
			for _, cmd := range cmds {
				if e := cmd.Err(); e != nil && !errors.Is(e, redis.Nil) {
					err = e
					break
				}
			}
		}
		h.record(ctx, start, err)
		return err
	}
}

func (h nodeHook) record(ctx context.Context, start time.Time, err error) {
	c, _ := ctx.Value(callKey{}).(*tracedCall)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.trips = append(c.trips, nodeTrip{addr: h.addr, at: start.Sub(c.at), took: time.Since(start), kind: errKind(err)})
	c.mu.Unlock()
}

// scriptTenant returns the tenant of a lease script command and whether
// it is a release, or ok false for any other command.
func (tr *leaseTrace) scriptTenant(cmd redis.Cmder) (tenant int, release, ok bool) {
	args := cmd.Args()
	if len(args) < 5 {
		return 0, false, false
	}
	if name, _ := args[0].(string); name != "evalsha" && name != "eval" {
		return 0, false, false
	}
	key, _ := args[3].(string)
	second, _ := args[4].(string)
	tenant, ok = tr.tenantOf[key]
	return tenant, second == lease.ReleasesKey(key), ok
}

// begin returns a new call when cmds hold lease scripts of known tenants,
// else nil.
func (tr *leaseTrace) begin(ctx context.Context, client int, cmds []redis.Cmder) *tracedCall {
	var tc []tracedCmd
	for _, cmd := range cmds {
		i, release, ok := tr.scriptTenant(cmd)
		if !ok {
			continue
		}
		var want int64
		if args := cmd.Args(); !release && len(args) > 8 { // evalsha sha 3 k1 k2 k3 rate burst want ...
			want, _ = strconv.ParseInt(fmt.Sprint(args[8]), 10, 64)
		}
		tc = append(tc, tracedCmd{tenant: i, release: release, want: want})
	}
	if len(tc) == 0 {
		return nil
	}
	c := &tracedCall{client: client, at: time.Now(), cmds: tc}
	if d, ok := ctx.Deadline(); ok {
		c.budget = d.Sub(c.at)
	}
	return c
}

// end records c's outcome.
func (tr *leaseTrace) end(c *tracedCall, cmds []redis.Cmder) {
	c.took = time.Since(c.at)
	j := 0
	for _, cmd := range cmds {
		if _, _, ok := tr.scriptTenant(cmd); !ok || j >= len(c.cmds) {
			continue
		}
		tc := &c.cmds[j]
		j++
		if tc.kind = errKind(cmd.Err()); tc.kind == "" {
			tc.parseReply(cmd)
		}
	}
	tr.mu.Lock()
	tr.calls = append(tr.calls, c)
	tr.mu.Unlock()
}

// parseReply reads a script's reply (lease.ParseAcquireReply,
// lease.ParseReleaseReply): the tokens it moved (granted, or credited),
// the bucket's tokens after it and its time.
func (tc *tracedCmd) parseReply(cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return
	}
	if tc.release {
		r, err := lease.ParseReleaseReply(c.Val(), math.MaxInt64)
		if err == nil {
			tc.tokens, tc.server, tc.moved = r.Tokens, r.ServerTime, r.Credited
		}
		return
	}
	if g, err := lease.ParseAcquireReply(c.Val(), math.MaxInt64); err == nil {
		tc.moved, tc.tokens, tc.server = float64(g.Granted), g.Tokens, g.ServerTime
	}
}

// errKind names an error by its first word (MOVED, TRYAGAIN, NOSCRIPT,
// CLUSTERDOWN, ...) or, for a network error, by its operation and cause
// ("read: i/o timeout"); "" for nil and redis.Nil.
func errKind(err error) string {
	if err == nil || errors.Is(err, redis.Nil) {
		return ""
	}
	kind := err.Error()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		kind, _, _ = strings.Cut(kind, " ")
	} else if i := strings.LastIndex(kind, ": "); i >= 0 {
		op, _, _ := strings.Cut(kind, " ")
		kind = op + ": " + kind[i+2:]
	}
	return kind
}

// isTimeout reports whether kind is a call running out of time: its
// context's deadline, or the socket deadline go-redis derived from it.
func isTimeout(kind string) bool {
	return kind == "context deadline exceeded" || strings.HasSuffix(kind, "i/o timeout")
}

// failure is one failed command of a traced call.
type failure struct {
	call *tracedCall
	cmd  tracedCmd
}

// failures returns the failed commands of the tenants for which keep
// returns true, in time order, leaving out NOSCRIPT: lease re-sends those
// with EVAL at once, in a call of their own.
func (tr *leaseTrace) failures(keep func(tenant int) bool) []failure {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var fs []failure
	for _, c := range tr.calls {
		for _, cmd := range c.cmds {
			if cmd.kind != "" && cmd.kind != "NOSCRIPT" && keep(cmd.tenant) {
				fs = append(fs, failure{c, cmd})
			}
		}
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].call.at.Before(fs[j].call.at) })
	return fs
}

// errorKinds lists the errors of the lease script commands, NOSCRIPT
// included, most frequent first: "TRYAGAIN x2, NOSCRIPT x1".
func (tr *leaseTrace) errorKinds() string {
	n := map[string]int{}
	tr.mu.Lock()
	for _, c := range tr.calls {
		for _, cmd := range c.cmds {
			if cmd.kind != "" {
				n[cmd.kind]++
			}
		}
	}
	tr.mu.Unlock()
	if len(n) == 0 {
		return "none"
	}
	kinds := make([]string, 0, len(n))
	for k := range n {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		return n[kinds[i]] > n[kinds[j]] || n[kinds[i]] == n[kinds[j]] && kinds[i] < kinds[j]
	})
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s x%d", k, n[k])
	}
	return b.String()
}

// ranOut reports whether the call used up its deadline: it was sent with
// none left, or it took what was left (within the millisecond that
// timers may fire early by the deadline go-redis sets on the socket).
func (c *tracedCall) ranOut() bool {
	switch {
	case c.budget == 0: // no deadline
		return false
	case c.budget < 0:
		return true
	}
	return c.took >= c.budget-time.Millisecond
}

// resent reports whether go-redis sent c's commands again after a round
// trip failed without a reply from Redis (a reset or timed-out
// connection): a ClusterClient re-sends a node's pipeline then, while
// time is left, although Redis may have run it.
func (c *tracedCall) resent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.trips[:max(len(c.trips)-1, 0)] {
		if t.kind != "" && strings.ToUpper(t.kind) != t.kind { // not an error reply (MOVED, TRYAGAIN, ...)
			return true
		}
	}
	return false
}

// nodes returns the addresses of the nodes c made round trips to.
func (c *tracedCall) nodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var addrs []string
	for _, t := range c.trips {
		if !slices.Contains(addrs, t.addr) {
			addrs = append(addrs, t.addr)
		}
	}
	return addrs
}

// String describes the call for a failure message.
func (c *tracedCall) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "limiter %d, %d commands, took %v with %v of its deadline left when sent; round trips:",
		c.client, len(c.cmds), c.took.Round(time.Millisecond), c.budget.Round(time.Millisecond))
	if len(c.trips) == 0 {
		b.WriteString(" none")
	}
	for _, t := range c.trips {
		fmt.Fprintf(&b, " [%s at +%v, took %v", t.addr, t.at.Round(time.Millisecond), t.took.Round(time.Millisecond))
		if t.kind != "" {
			fmt.Fprintf(&b, ": %s", t.kind)
		}
		b.WriteString("]")
	}
	return b.String()
}

// bucketLedger is a tenant's global bucket as the replies to the limiters'
// calls show it, replayed in the bucket's time.
type bucketLedger struct {
	granted  float64 // tokens acquires were granted, as their replies said
	credited float64 // tokens releases credited back
	// unreplied is what the bucket lost between two replies beyond what
	// those replies account for: tokens taken by calls whose replies never
	// came back (Redis ran them; the caller had given up on its deadline).
	// The limiters never saw those tokens: they cost utilization, not the
	// bound.
	unreplied float64
	// timedOut is what the tenant's acquires that ran out of their
	// deadline asked for: all that such calls can have taken.
	timedOut float64
	// resent is what the tenant's acquires asked for that succeeded
	// after go-redis had re-sent them (resent): the first sending may
	// have run too.
	resent   float64
	overflow float64 // refill lost while the bucket was full
	// overflowFailing is the part of overflow lost after a call of the
	// tenant that ran out of its deadline, up to the next reply: while the
	// machine kept the limiters from leasing.
	overflowFailing float64
	first           time.Time // bucket time of the first reply
	last            time.Time // and of the last
	level           float64   // tokens in the bucket after the last reply
}

// ledgers replays each tenant's replies (n tenants, rate and burst of
// each from limits) up to end (Redis clock: the limiters' Close gives
// tokens back after it). A bucket is created full, at its first call.
func (tr *leaseTrace) ledgers(n int, end time.Time, limits func(tenant int) (rate, burst float64)) []bucketLedger {
	events := make([][]tracedCmd, n)
	timeouts := make([][]time.Time, n) // when each tenant's timed-out calls were sent
	ls := make([]bucketLedger, n)
	tr.mu.Lock()
	for _, c := range tr.calls {
		for _, cmd := range c.cmds {
			switch {
			case cmd.kind == "" && !cmd.server.IsZero() && !cmd.server.After(end):
				events[cmd.tenant] = append(events[cmd.tenant], cmd)
				if !cmd.release && c.resent() {
					ls[cmd.tenant].resent += float64(cmd.want)
				}
			case cmd.kind != "" && c.ranOut():
				if !cmd.release {
					ls[cmd.tenant].timedOut += float64(cmd.want)
				}
				timeouts[cmd.tenant] = append(timeouts[cmd.tenant], c.at)
			}
		}
	}
	tr.mu.Unlock()
	for i, ev := range events {
		if len(ev) == 0 {
			continue
		}
		sort.Slice(ev, func(a, b int) bool { return ev[a].server.Before(ev[b].server) })
		slices.SortFunc(timeouts[i], time.Time.Compare)
		rate, burst := limits(i)
		l := &ls[i]
		l.first = ev[0].server
		level, last := burst, ev[0].server
		for _, e := range ev {
			full := last.Add(time.Duration((burst - level) / rate * float64(time.Second))) // when the bucket filled up
			level += rate * e.server.Sub(last).Seconds()
			if level > burst {
				l.overflow += level - burst
				// From the first call between the two replies that ran out
				// of its deadline (Redis' clock is this host's), the machine
				// kept the limiters from leasing.
				for _, at := range timeouts[i] {
					if at.After(last) && at.Before(e.server) {
						from := full
						if at.After(from) {
							from = at
						}
						l.overflowFailing += rate * e.server.Sub(from).Seconds()
						break
					}
				}
				level = burst
			}
			before := e.tokens + e.moved // what the bucket held when the call ran
			if e.release {
				before = e.tokens - e.moved
				l.credited += e.moved
			} else {
				l.granted += e.moved
			}
			// Half a token: the scripts' own rounding of the refill.
			if d := level - before; d > 0.5 {
				l.unreplied += d
			}
			level, last = e.tokens, e.server
		}
		l.last, l.level = last, level
	}
	return ls
}

// checkFailures fails the test for every failed lease command of a tenant
// that healthy says must not fail, unless the machine explains it: the
// call ran out of its own deadline (a timeout, or the MOVED or ASK
// redirect go-redis was following when it did), and none of its round
// trips went to a node in dead (unless its deadline had passed before it
// was sent: then it fails wherever it goes). allow, when not nil, accepts
// more (TRYAGAIN during a reshard, CLUSTERDOWN while the cluster is down).
// It returns the number of failed commands of each tenant that it
// accepted, and logs them.
//
// A call that timed out on a live node was slowed by the machine: the
// probe's worst stall of this process during its deadline is logged with
// it. A dead master's failure leaking into its tenants' calls would show
// as a round trip to the dead node, or as an error other than a timeout.
func checkFailures(t *testing.T, tr *leaseTrace, probe *stallProbe, callTimeout time.Duration, healthy func(tenant int) bool, dead []string, allow func(failure) bool) map[int]int {
	t.Helper()
	accepted := map[int]int{}
	var (
		unexplained int
		timeouts    int
		calls       = map[*tracedCall]bool{}
		kinds       = map[string]int{}
		worst       time.Duration
	)
	for _, f := range tr.failures(healthy) {
		// A call whose deadline had passed before go-redis got it fails
		// wherever it goes (and lease, unable to look up the masters
		// then, sends it as one pipeline to all of them): the machine
		// did not run the syncer in time.
		deadTrip := ""
		for _, addr := range f.call.nodes() {
			if slices.Contains(dead, addr) && f.call.budget >= 0 {
				deadTrip = addr
			}
		}
		// A timeout, or the redirect go-redis was following when the
		// deadline passed. (Other errors that go-redis retries until the
		// deadline, CLUSTERDOWN say, are not the machine's.)
		timedOut := f.call.ranOut() && deadTrip == "" &&
			(isTimeout(f.cmd.kind) || f.cmd.kind == "MOVED" || f.cmd.kind == "ASK")
		switch {
		case timedOut:
			timeouts++
			if !calls[f.call] {
				// The stalls in the call's deadline, from when it was set.
				set := f.call.at.Add(f.call.budget).Add(-callTimeout)
				worst = max(worst, probe.worst(set, f.call.at.Add(f.call.took)))
			}
		case allow != nil && allow(f):
		default:
			unexplained++
			if unexplained <= 10 {
				why := "an error other than running out of its deadline"
				if deadTrip != "" {
					why = "a round trip to the dead node " + deadTrip
				}
				t.Errorf("tenant %d: lease call failed with %q at %s, by %s: %s", f.cmd.tenant, f.cmd.kind,
					f.call.at.Format("15:04:05.000"), why, f.call)
			}
			continue
		}
		calls[f.call] = true
		accepted[f.cmd.tenant]++
		kinds[f.cmd.kind]++
	}
	if unexplained > 10 {
		t.Errorf("... %d lease commands failed in all without the machine explaining them", unexplained)
	}
	if len(accepted) > 0 {
		t.Logf("%d lease commands (in %d calls) of tenants that must not fail did fail, explained: %v; %d of them ran out of their deadline on live nodes (this process stalled up to %v during those deadlines)",
			sumValues(accepted), len(calls), kinds, timeouts, worst.Round(time.Millisecond))
	}
	return accepted
}

// checkUnavailable fails the test for every tenant that healthy says must
// not fail and that was denied as unavailable without a failed lease call
// of its own (failed, as checkFailures returned) before: a tenant is only
// degraded by its own calls' failures (no breaker or other state is shared
// between tenants on a cluster).
func checkUnavailable(t *testing.T, ld *demand, tr *leaseTrace, failed map[int]int, healthy func(tenant int) bool) {
	t.Helper()
	first := map[int]time.Time{}
	for _, f := range tr.failures(healthy) {
		if _, ok := first[f.cmd.tenant]; !ok {
			first[f.cmd.tenant] = f.call.at
		}
	}
	counts := ld.snap()
	for i, name := range ld.names {
		u := counts[i].unavailable()
		if u == 0 || !healthy(i) {
			continue
		}
		at := time.Unix(0, ld.firstUnav[i].Load())
		switch f, ok := first[i]; {
		case failed[i] == 0:
			t.Errorf("%s: %d denials with reason unavailable, and no lease call of its own failed for a reason the machine explains", name, u)
		case !ok || at.Before(f):
			t.Errorf("%s: denied as unavailable at %s, before any lease call of its own failed", name, at.Format("15:04:05.000"))
		}
	}
}

func sumValues(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
