package lease

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/internal/redisserver"
)

func TestMain(m *testing.M) { redisserver.Main(m) }

// These tests share one server and none runs beside another: some flush
// the script cache or read server-wide command statistics. (The subtests
// of TestMixedFleetRollout run beside one another, each on its own keys.)

// counter is a go-redis hook that records script commands, alone and in
// pipelines, as the client sends them.
type counter struct {
	mu        sync.Mutex
	single    []string   // names of script commands sent alone
	pipelines [][]string // pipelines with script commands
	other     int        // other commands and pipelines (e.g. connection handshakes)
}

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.mu.Lock()
			h.single = append(h.single, n)
			h.mu.Unlock()
		} else {
			h.mu.Lock()
			h.other++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// go-redis also runs a new connection's handshake (CLIENT SETINFO)
		// through this hook; only pipelines of scripts are lease's.
		names := make([]string, len(cmds))
		scripts := false
		for i, c := range cmds {
			names[i] = c.Name()
			scripts = scripts || names[i] == "evalsha" || names[i] == "eval"
		}
		h.mu.Lock()
		if scripts {
			h.pipelines = append(h.pipelines, names)
		} else {
			h.other++
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *counter) reset() {
	h.mu.Lock()
	h.single, h.pipelines, h.other = nil, nil, 0
	h.mu.Unlock()
}

func (h *counter) otherCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.other
}

func (h *counter) snapshot() (single []string, pipelines [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.single...), append([][]string(nil), h.pipelines...)
}

// setup returns a lease Client on the shared server under a fresh prefix,
// the raw client to inspect Redis with, and the hook counting what the
// lease Client sends.
func setup(t *testing.T) (*Client, *redis.Client, *counter) {
	t.Helper()
	rdb := redisserver.Client(t)
	h := &counter{}
	scripted := redisserver.Client(t)
	scripted.AddHook(h)
	c, err := NewClient(scripted, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return c, rdb, h
}

func exists(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func pttl(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	ms, err := rdb.Do(context.Background(), "PTTL", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// ownServer reports whether the shared server is private to this test
// binary, so that server-wide statistics count only our commands.
func ownServer(t *testing.T) bool {
	return redisserver.Shared(t).Kind != "env"
}

// cmdCalls returns the calls count of a command in INFO commandstats.
func cmdCalls(t *testing.T, rdb *redis.Client, name string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 0
}

func secondsBetween(a, b Grant) float64 {
	return float64(b.ServerTime.Sub(a.ServerTime).Microseconds()) / 1e6
}

func TestAcquireFullPartialZero(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setup(t)
	lim := Limits{Rate: 1, Burst: 10}

	g1, err := c.Acquire(ctx, "t", lim, 4)
	if err != nil {
		t.Fatal(err)
	}
	// A new bucket starts full: exactly 10 - 4 left.
	if g1.Granted != 4 || g1.Tokens != 6 {
		t.Fatalf("first acquire: %+v, want 4 granted, 6 left", g1)
	}
	if d := time.Since(g1.ServerTime); d > time.Minute || d < -time.Minute {
		t.Fatalf("ServerTime %v is far from now", g1.ServerTime)
	}

	g2, err := c.Acquire(ctx, "t", lim, 10)
	if err != nil {
		t.Fatal(err)
	}
	e2 := secondsBetween(g1, g2) // refill between the calls, at 1 token/s
	if e2 < 0 || e2 >= 1 {
		t.Fatalf("calls %vs apart: the test assumes < 1s", e2)
	}
	if g2.Granted != 6 {
		t.Fatalf("partial grant: %+v, want 6", g2)
	}
	if math.Abs(g2.Tokens-e2*lim.Rate) > 1e-9 {
		t.Fatalf("tokens after partial grant %v, want the refill %v", g2.Tokens, e2*lim.Rate)
	}

	g3, err := c.Acquire(ctx, "t", lim, 5)
	if err != nil {
		t.Fatal(err)
	}
	e3 := secondsBetween(g2, g3)
	if g3.Granted != 0 {
		t.Fatalf("empty bucket granted %d", g3.Granted)
	}
	if math.Abs(g3.Tokens-(g2.Tokens+e3*lim.Rate)) > 1e-9 {
		t.Fatalf("tokens %v, want %v", g3.Tokens, g2.Tokens+e3*lim.Rate)
	}
	// 5 tokens at 1/s minus what refilled since the bucket was drained.
	ra := g3.RetryAfter(5, lim.Rate)
	want := 5*time.Second - g3.ServerTime.Sub(g2.ServerTime) - time.Duration(g2.Tokens*1e9)
	if d := ra - want; d < -2*time.Microsecond || d > 2*time.Microsecond {
		t.Fatalf("RetryAfter = %v, want %v", ra, want)
	}
	if ra > 5*time.Second || ra < 5*time.Second-g3.ServerTime.Sub(g1.ServerTime) {
		t.Fatalf("RetryAfter = %v, want within 5s minus the test's duration", ra)
	}

	// want 0 reads (and refills) without granting.
	g4, err := c.Acquire(ctx, "t", lim, 0)
	if err != nil || g4.Granted != 0 || g4.Tokens < g3.Tokens {
		t.Fatalf("read: %+v, %v", g4, err)
	}
}

func TestAcquireRefillsOverRealTime(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setup(t)
	lim := Limits{Rate: 100, Burst: 100}
	began := time.Now()
	g1, err := c.Acquire(ctx, "t", lim, 100)
	if err != nil || g1.Granted != 100 || g1.Tokens != 0 {
		t.Fatalf("drain: %+v, %v", g1, err)
	}
	time.Sleep(200 * time.Millisecond) // the passing of time is what is tested
	g2, err := c.Acquire(ctx, "t", lim, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Both scripts ran within the calls: the time between them is at
	// least the sleep and at most what the test saw pass (the sleep may
	// run long on a loaded machine).
	took := time.Since(began)
	refill := secondsBetween(g1, g2) * lim.Rate
	if d := float64(g2.Granted) - math.Floor(refill); d < -1 || d > 1 {
		t.Fatalf("granted %d after %.6fs, want floor(%v) ±1", g2.Granted, secondsBetween(g1, g2), refill)
	}
	if least, most := int64(0.2*lim.Rate)-1, int64(took.Seconds()*lim.Rate)+1; g2.Granted < least || g2.Granted > most {
		t.Fatalf("granted %d %v after the drain began (a sleep of 200 ms between) at 100/s, want %d..%d", g2.Granted, took, least, most)
	}
	if math.Abs(g2.Tokens-(refill-float64(g2.Granted))) > 1e-6 {
		t.Fatalf("tokens left %v, want %v", g2.Tokens, refill-float64(g2.Granted))
	}
}

func TestTTLAndRelease(t *testing.T) {
	ctx := context.Background()
	c, rdb, h := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	key := c.Key("t")

	if _, err := c.Acquire(ctx, "t", lim, 4); err != nil {
		t.Fatal(err)
	}
	// 4 tokens missing at 1/s: full in 4s, expire a second later.
	if ms := pttl(t, rdb, key); ms <= 4000 || ms > 5000 {
		t.Fatalf("PTTL after taking 4 of 10 at 1/s = %dms, want (4000, 5000]", ms)
	}

	// The 4 were granted from a full bucket, which would still be full had
	// they not been: giving 2 back credits nothing (see aged_test.go for
	// credits), but the release still refills, stores and sets the TTL.
	r, err := c.Release(ctx, "t", lim, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Credited != 0 || r.Tokens < 6 || r.Tokens > 6.5 {
		t.Fatalf("release of 2 granted from a full bucket = %+v, want 0 credited, 6 plus a little refill", r)
	}
	if ms, want := pttl(t, rdb, key), int64(math.Ceil((10-r.Tokens)*1000))+1000; ms <= 0 || ms > want {
		t.Fatalf("PTTL after release = %dms, want (0, %d]", ms, want)
	}

	// A missing key is a full bucket: releasing into it reports burst,
	// credits nothing and leaves the key missing.
	r, err = c.Release(ctx, "absent", lim, 3, 0)
	if err != nil || r.Tokens != 10 || r.Credited != 0 || r.ServerTime.IsZero() {
		t.Fatalf("release on missing key: %+v, %v, want 10 tokens, 0 credited", r, err)
	}
	if exists(t, rdb, c.Key("absent")) {
		t.Fatal("release created a key")
	}

	// Release of nothing does not call Redis.
	h.reset()
	if r, err := c.Release(ctx, "t", lim, 0, 0); err != nil || r != (Return{}) {
		t.Fatalf("Release(0) = %+v, %v", r, err)
	}
	if single, pipes := h.snapshot(); len(single)+len(pipes) != 0 {
		t.Fatalf("Release(0) sent %q %q", single, pipes)
	}
}

func TestExtremeLimits(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)

	// Tiny rate: the time to refill is beyond what PEXPIRE should be given,
	// so the key is kept without expiry (and a former TTL removed).
	tiny := Limits{Rate: 1e-13, Burst: 10}
	if _, err := c.Acquire(ctx, "tiny", Limits{Rate: 1, Burst: 10}, 1); err != nil {
		t.Fatal(err)
	}
	if ms := pttl(t, rdb, c.Key("tiny")); ms <= 0 {
		t.Fatalf("PTTL = %d, want a TTL", ms)
	}
	if _, err := c.Acquire(ctx, "tiny", tiny, 1); err != nil {
		t.Fatal(err)
	}
	if ms := pttl(t, rdb, c.Key("tiny")); ms != -1 {
		t.Fatalf("PTTL with rate 1e-13 = %d, want -1 (no expiry)", ms)
	}

	// Slow but representable: 1 token at 1e-9/s is 1e12 s to refill.
	if _, err := c.Acquire(ctx, "slow", Limits{Rate: 1e-9, Burst: 10}, 1); err != nil {
		t.Fatal(err)
	}
	if ms := pttl(t, rdb, c.Key("slow")); ms < 999_999_000_000 || ms > 1_000_000_001_000 {
		t.Fatalf("PTTL with rate 1e-9 = %d, want about 1e12 ms", ms)
	}

	// The largest limits.
	big := Limits{Rate: MaxRate, Burst: MaxBurst}
	g, err := c.Acquire(ctx, "big", big, math.MaxInt64)
	if err != nil || g.Granted != MaxBurst || g.Tokens != 0 {
		t.Fatalf("max limits: %+v, %v", g, err)
	}
	if g, err = c.Acquire(ctx, "big", big, math.MaxInt64); err != nil || g.Granted > MaxBurst || g.Granted < 0 {
		t.Fatalf("max limits again: %+v, %v", g, err)
	}

	// A smaller burst applies at once.
	lim := Limits{Rate: 1, Burst: 10}
	if _, err := c.Acquire(ctx, "shrink", lim, 0); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Acquire(ctx, "shrink", Limits{Rate: 1, Burst: 5}, 0); err != nil || g.Tokens != 5 {
		t.Fatalf("after lowering burst to 5: %+v, %v", g, err)
	}
}

func TestConcurrentAcquiresNeverOvergrant(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setup(t)
	lim := Limits{Rate: 1e-9, Burst: 100} // refill is negligible during the test
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				g, err := c.Acquire(ctx, "shared", lim, 1)
				if err != nil {
					errs <- err
					return
				}
				total.Add(g.Granted)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := total.Load(); got != 100 {
		t.Fatalf("500 acquires of 1 from a bucket of 100 granted %d", got)
	}
}

func TestScriptFlushThenAcquire(t *testing.T) {
	ctx := context.Background()
	c, rdb, h := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	evalBefore := cmdCalls(t, rdb, "eval")
	g, err := c.Acquire(ctx, "t", lim, 3)
	if err != nil || g.Granted != 3 {
		t.Fatalf("acquire after SCRIPT FLUSH: %+v, %v", g, err)
	}
	single, _ := h.snapshot()
	if want := []string{"evalsha", "eval"}; !slices.Equal(single, want) {
		t.Fatalf("sent %q, want %q", single, want)
	}
	if d := cmdCalls(t, rdb, "eval") - evalBefore; d < 1 || (ownServer(t) && d != 1) {
		t.Fatalf("EVAL calls grew by %d, want 1", d)
	}
	// The EVAL loaded it: EVALSHA alone from now on.
	h.reset()
	if _, err := c.Acquire(ctx, "t", lim, 1); err != nil {
		t.Fatal(err)
	}
	if single, _ := h.snapshot(); !slices.Equal(single, []string{"evalsha"}) {
		t.Fatalf("sent %q, want just evalsha", single)
	}

	// Release has its own script and its own fallback.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	h.reset()
	if r, err := c.Release(ctx, "t", lim, 2, time.Second); err != nil || r.Tokens < 6 || r.Tokens > 10 {
		t.Fatalf("release after SCRIPT FLUSH: %+v, %v", r, err)
	}
	if single, _ := h.snapshot(); !slices.Equal(single, []string{"evalsha", "eval"}) {
		t.Fatalf("sent %q, want evalsha then eval", single)
	}
}

func TestScriptFlushThenAcquireMany(t *testing.T) {
	ctx := context.Background()
	c, rdb, h := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	reqs := make([]Request, 50)
	for i := range reqs {
		reqs[i] = Request{Tenant: fmt.Sprint("t", i), Limits: lim, Want: 2}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := c.AcquireMany(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Grant.Granted != 2 || r.Grant.Tokens != 8 {
			t.Fatalf("request %d after SCRIPT FLUSH: %+v", i, r)
		}
	}
	_, pipes := h.snapshot()
	if len(pipes) != 2 || len(pipes[0]) != 50 || len(pipes[1]) != 50 || pipes[0][0] != "evalsha" || pipes[1][0] != "eval" {
		t.Fatalf("pipelines: %d, want 50 evalsha then 50 eval", len(pipes))
	}
	h.reset()
	if _, err := c.AcquireMany(ctx, reqs, res); err != nil {
		t.Fatal(err)
	}
	if _, pipes := h.snapshot(); len(pipes) != 1 {
		t.Fatalf("%d pipelines once the script is loaded, want 1", len(pipes))
	}

	// ReleaseMany falls back the same way.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rel := make([]ReleaseRequest, len(reqs))
	for i := range rel {
		rel[i] = ReleaseRequest{Tenant: reqs[i].Tenant, Limits: lim, Amount: 1, Age: time.Second}
	}
	h.reset()
	for i, r := range c.ReleaseMany(ctx, rel) {
		if r.Err != nil || r.Return.Tokens < 6 || r.Return.Tokens > 10 {
			t.Fatalf("release %d after SCRIPT FLUSH: %+v", i, r)
		}
	}
	if _, pipes := h.snapshot(); len(pipes) != 2 || pipes[0][0] != "evalsha" || pipes[1][0] != "eval" {
		t.Fatalf("release pipelines %v, want evalsha then eval", pipes)
	}
}

// TestScriptDigestsAreRedis: the digests computed in Go, which EVALSHA
// sends, are the ones Redis computes for the scripts.
func TestScriptDigestsAreRedis(t *testing.T) {
	ctx := context.Background()
	_, rdb, _ := setup(t)
	for _, s := range []*script{acquireScript, releaseScript, quotaScript, adminScript, inspectScript, rosterScript, leaveScript, probeScript} {
		sha, err := rdb.ScriptLoad(ctx, s.src).Result()
		if err != nil {
			t.Fatal(err)
		}
		if sha != s.sha {
			t.Errorf("SCRIPT LOAD returned digest %s, want %s", sha, s.sha)
		}
	}
}

func TestAcquireManyThousandTenantsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, rdb, h := setup(t)
	lim := Limits{Rate: 5, Burst: 10}
	// Warm up: load the script, and open the pipeline connection (whose
	// handshake is a round trip of its own, once per connection).
	if _, err := c.AcquireMany(ctx, []Request{{Tenant: "warm-up", Limits: lim, Want: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Tenant: fmt.Sprintf("tenant-%d", i), Limits: lim, Want: 3}
	}
	h.reset()
	before := cmdCalls(t, rdb, "evalsha")
	res, err := c.AcquireMany(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := cmdCalls(t, rdb, "evalsha")
	if len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	for i, r := range res {
		if r.Err != nil || r.Grant.Granted != 3 || r.Grant.Tokens != 7 {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	single, pipes := h.snapshot()
	if other := h.otherCount(); len(single) != 0 || other != 0 || len(pipes) != 1 || len(pipes[0]) != n {
		t.Fatalf("sent %d script commands, %d other round trips and pipelines of sizes %v, want one pipeline of %d",
			len(single), other, pipeLens(pipes), n)
	}
	if d := after - before; d < n || (ownServer(t) && d != n) {
		t.Fatalf("EVALSHA calls grew by %d, want %d", d, n)
	}
	// Every tenant got its own key.
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, n)
	for i := range reqs {
		cmds[i] = pipe.Exists(ctx, c.Key(reqs[i].Tenant))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if cmd.Val() != 1 {
			t.Fatalf("tenant %d has no key", i)
		}
	}
}

func pipeLens(p [][]string) []int {
	l := make([]int, len(p))
	for i := range p {
		l[i] = len(p[i])
	}
	return l
}

func TestAcquireManyMixed(t *testing.T) {
	ctx := context.Background()
	c, rdb, h := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	reqs := []Request{
		{Tenant: "a", Limits: lim, Want: 4},
		{Tenant: "bad-want", Limits: lim, Want: -1},
		{Tenant: "a", Limits: lim, Want: 10}, // same tenant twice: applied in order
		{Tenant: "bad-rate", Limits: Limits{Rate: math.NaN(), Burst: 10}, Want: 1},
		{Tenant: "b", Limits: lim, Want: 0},
	}
	// The script loaded first: on a server that has not run it yet
	// (this test run alone), the first pipeline meets NOSCRIPT and is
	// sent again, two pipelines where the count below wants one.
	if _, err := c.AcquireMany(ctx, []Request{{Tenant: "warm", Limits: lim, Want: 0}}, nil); err != nil {
		t.Fatal(err)
	}
	h.reset()
	// A reused results slice of enough capacity is used in place.
	buf := make([]Result, 0, 8)
	res, err := c.AcquireMany(ctx, reqs, buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(reqs) || &res[0] != &buf[:1][0] {
		t.Fatalf("results not in the given buffer")
	}
	if res[0].Err != nil || res[0].Grant.Granted != 4 {
		t.Errorf("a: %+v", res[0])
	}
	if res[2].Err != nil || res[2].Grant.Granted != 6 {
		t.Errorf("a again: %+v, want the 6 left", res[2])
	}
	if res[4].Err != nil || res[4].Grant.Granted != 0 || res[4].Grant.Tokens != 10 {
		t.Errorf("b: %+v", res[4])
	}
	for _, i := range []int{1, 3} {
		if !errors.Is(res[i].Err, ErrBadRequest) {
			t.Errorf("request %d: %v, want ErrBadRequest", i, res[i].Err)
		}
		if exists(t, rdb, c.Key(reqs[i].Tenant)) {
			t.Errorf("request %d created a key", i)
		}
	}
	if _, pipes := h.snapshot(); len(pipes) != 1 || len(pipes[0]) != 3 {
		t.Fatalf("pipelines %v, want one of the 3 valid requests", pipeLens(pipes))
	}

	// Nothing valid, or nothing at all: no round trip.
	h.reset()
	if res, err := c.AcquireMany(ctx, reqs[1:2], nil); err != nil || len(res) != 1 || res[0].Err == nil {
		t.Fatalf("all invalid: %+v, %v", res, err)
	}
	if res, err := c.AcquireMany(ctx, nil, nil); err != nil || len(res) != 0 {
		t.Fatalf("empty: %+v, %v", res, err)
	}
	if single, pipes := h.snapshot(); len(single)+len(pipes) != 0 {
		t.Fatalf("sent %q %v", single, pipeLens(pipes))
	}
}

func TestReleaseMany(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	c, err := NewClient(rdb, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 1e-9, Burst: 10} // nothing refills during the test
	// Bring a and b to 5 tokens, out of reach of the releases' age, then
	// take the 5: they can be credited up to 10 - 5.
	tenants := []string{"a", "b"}
	for _, tenant := range tenants {
		if g, err := c.Acquire(ctx, tenant, lim, 5); err != nil || g.Granted != 5 {
			t.Fatalf("%s: %+v, %v", tenant, g, err)
		}
	}
	waitBeyondAge(t, rdb)
	start := map[string]time.Time{}
	for _, tenant := range tenants {
		start[tenant] = time.Now()
		if g, err := c.Acquire(ctx, tenant, lim, 5); err != nil || g.Granted != 5 {
			t.Fatalf("%s: %+v, %v", tenant, g, err)
		}
	}
	res := c.ReleaseMany(ctx, []ReleaseRequest{
		{Tenant: "a", Limits: lim, Amount: 3, Age: ageSince(start["a"])},
		{Tenant: "b", Limits: lim, Amount: 0, Age: ageSince(start["b"])},
		{Tenant: "b", Limits: lim, Amount: -1},
		{Tenant: "b", Limits: Limits{Rate: 1, Burst: 0}, Amount: 1},
		{Tenant: "b", Limits: lim, Amount: 1, Age: -time.Millisecond},
		{Tenant: "b", Limits: lim, Amount: 20, Age: ageSince(start["b"])},
		{Tenant: "a", Limits: lim, Amount: 2, Age: time.Hour}, // reaches back to the full bucket
	})
	if len(res) != 7 {
		t.Fatalf("%d results, want 7", len(res))
	}
	// b's peak, 5 and a fraction of a token of refill, is recorded rounded
	// up to 8 significant bits, 5.03125: 4.96875 credited. (a's is
	// rounded the same, but 3 is less than 10 - 5.03125.)
	for i, want := range map[int]Return{0: {Credited: 3, Tokens: 3}, 5: {Credited: 4.96875, Tokens: 4.96875}, 6: {Credited: 0, Tokens: 3}} {
		r := res[i]
		if r.Err != nil || math.Abs(r.Return.Credited-want.Credited) > 1e-6 || math.Abs(r.Return.Tokens-want.Tokens) > 1e-6 || r.Return.ServerTime.IsZero() {
			t.Errorf("request %d: %+v, want credited %v, %v tokens", i, r, want.Credited, want.Tokens)
		}
	}
	if res[1] != (ReleaseResult{}) {
		t.Errorf("amount 0: %+v, want a zero result", res[1])
	}
	for _, i := range []int{2, 3, 4} {
		if !errors.Is(res[i].Err, ErrBadRequest) || res[i].Return != (Return{}) {
			t.Errorf("request %d: %+v, want ErrBadRequest", i, res[i])
		}
	}
	for tenant, want := range map[string]float64{"a": 3, "b": 4.96875} {
		g, err := c.Acquire(ctx, tenant, lim, 0)
		if err != nil || math.Abs(g.Tokens-want) > 1e-6 {
			t.Errorf("%s after ReleaseMany: %+v, %v, want %v tokens", tenant, g, err, want)
		}
	}
	if res := c.ReleaseMany(ctx, nil); len(res) != 0 {
		t.Errorf("ReleaseMany(nil) = %v", res)
	}
}

func TestHostileTenantsOnRedis(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	tenants := hostileTenants()
	keys := map[string]bool{}
	for _, tenant := range tenants {
		k := checkKey(t, c.prefix, tenant)
		keys[k] = true
		g, err := c.Acquire(ctx, tenant, lim, 1)
		if err != nil || g.Granted != 1 || g.Tokens != 9 {
			// 9 left proves no two tenants share a bucket.
			t.Fatalf("tenant %.40q: %+v, %v", tenant, g, err)
		}
		if !exists(t, rdb, k) {
			t.Fatalf("tenant %.40q: key %q missing", tenant, k)
		}
	}
	if len(keys) != len(tenants) {
		t.Fatalf("%d distinct keys for %d tenants", len(keys), len(tenants))
	}
	// Exactly these keys, nothing else, under the prefix.
	var n int
	iter := rdb.Scan(ctx, 0, c.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if !keys[iter.Val()] {
			t.Errorf("unexpected key %q", iter.Val())
		}
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(tenants) {
		t.Fatalf("%d keys in Redis, want %d", n, len(tenants))
	}
}

func TestBadArgumentsNeverReachRedis(t *testing.T) {
	ctx := context.Background()
	c, rdb, h := setup(t)
	ok := Limits{Rate: 1, Burst: 10}
	for _, tc := range []struct {
		name string
		lim  Limits
		want int64
	}{
		{"NaN rate", Limits{Rate: math.NaN(), Burst: 10}, 1},
		{"+Inf rate", Limits{Rate: math.Inf(1), Burst: 10}, 1},
		{"-Inf rate", Limits{Rate: math.Inf(-1), Burst: 10}, 1},
		{"zero rate", Limits{Rate: 0, Burst: 10}, 1},
		{"negative rate", Limits{Rate: -1, Burst: 10}, 1},
		{"huge rate", Limits{Rate: 1e13, Burst: 10}, 1},
		{"zero burst", Limits{Rate: 1, Burst: 0}, 1},
		{"negative burst", Limits{Rate: 1, Burst: -5}, 1},
		{"huge burst", Limits{Rate: 1, Burst: MaxBurst + 1}, 1},
		{"negative want", ok, -1},
	} {
		h.reset()
		tenant := "bad-" + tc.name
		if _, err := c.Acquire(ctx, tenant, tc.lim, tc.want); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: Acquire: %v, want ErrBadRequest", tc.name, err)
		}
		if _, err := c.Release(ctx, tenant, tc.lim, tc.want, 0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: Release: %v, want ErrBadRequest", tc.name, err)
		}
		res, err := c.AcquireMany(ctx, []Request{{Tenant: tenant, Limits: tc.lim, Want: tc.want}}, nil)
		if err != nil || !errors.Is(res[0].Err, ErrBadRequest) {
			t.Errorf("%s: AcquireMany: %v, %v, want ErrBadRequest", tc.name, res[0].Err, err)
		}
		if res := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: tenant, Limits: tc.lim, Amount: tc.want}}); !errors.Is(res[0].Err, ErrBadRequest) {
			t.Errorf("%s: ReleaseMany: %v, want ErrBadRequest", tc.name, res[0].Err)
		}
		if single, pipes := h.snapshot(); len(single)+len(pipes) != 0 {
			t.Errorf("%s: sent %q %v", tc.name, single, pipeLens(pipes))
		}
		if exists(t, rdb, c.Key(tenant)) {
			t.Errorf("%s: key created", tc.name)
		}
	}
	// A negative age, even with nothing to give back.
	h.reset()
	for _, amount := range []int64{0, 5} {
		if _, err := c.Release(ctx, "t", ok, amount, -time.Nanosecond); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "age") {
			t.Errorf("Release(amount %d, negative age): %v, want ErrBadRequest naming age", amount, err)
		}
		if res := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: "t", Limits: ok, Amount: amount, Age: -time.Second}}); !errors.Is(res[0].Err, ErrBadRequest) {
			t.Errorf("ReleaseMany(amount %d, negative age): %v, want ErrBadRequest", amount, res[0].Err)
		}
	}
	if single, pipes := h.snapshot(); len(single)+len(pipes) != 0 {
		t.Errorf("negative age: sent %q %v", single, pipeLens(pipes))
	}
}

func TestScriptsValidateArguments(t *testing.T) {
	// The scripts check their arguments too, for callers that bypass the
	// Go checks (or a future version skew).
	ctx := context.Background()
	c, rdb, _ := setup(t)
	// rate, burst, want or amount (release adds age 0 and grant 0).
	for i, args := range [][]string{
		{"nan", "10", "1"}, {"inf", "10", "1"}, {"-inf", "10", "1"}, {"0", "10", "1"},
		{"-1", "10", "1"}, {"x", "10", "1"},
		{"1", "0", "1"}, {"1", "1.5", "1"}, {"1", "inf", "1"}, {"1", "", "1"},
		{"1", "10", "-1"}, {"1", "10", "0.5"}, {"1", "10", "nan"}, {"1", "10", "many"},
	} {
		key := c.Key(fmt.Sprint("direct-", i))
		acq := []interface{}{args[0], args[1], args[2]}
		rel := []interface{}{args[0], args[1], args[2], "0", "0"}
		// The bucket exists, so that release gets past its missing-key case.
		if err := rdb.HSet(ctx, key, "tk", "5", "ts", "1").Err(); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			s    *script
			argv []interface{}
		}{{acquireScript, acq}, {releaseScript, rel}} {
			err := tc.s.run(ctx, rdb, []string{key, key + ":x", key + ":q"}, tc.argv...).Err()
			if !redis.HasErrorPrefix(err, "leasequota: bad argument") {
				t.Errorf("%q: %v, want a bad argument error", tc.argv, err)
			}
		}
		if _, err := parseGrant(acquireScript.run(ctx, rdb, []string{key, key + ":x", key + ":q"}, acq...), 1); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: parsed error %v, want ErrBadRequest", args, err)
		}
		if m, _ := rdb.HGetAll(ctx, key).Result(); len(m) != 2 || m["tk"] != "5" {
			t.Errorf("%q: bucket changed: %v", args, m)
		}
	}
	// Release's age.
	key := c.Key("direct-age")
	if err := rdb.HSet(ctx, key, "tk", "5", "ts", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, age := range []string{"-1", "0.5", "nan", "inf", "", "old"} {
		err := releaseScript.run(ctx, rdb, []string{key, key + ":x", key + ":q"}, "1", "10", "1", age, "0").Err()
		if !redis.HasErrorPrefix(err, "leasequota: bad argument: age") {
			t.Errorf("age %q: %v, want a bad argument error", age, err)
		}
	}
	if m, _ := rdb.HGetAll(ctx, key).Result(); len(m) != 2 || m["tk"] != "5" {
		t.Errorf("bad ages changed the bucket: %v", m)
	}
	// Release's grant id: a 32-bit integer.
	for _, grant := range []string{"-1", "0.5", "4294967296", "nan", "", "id"} {
		err := releaseScript.run(ctx, rdb, []string{key, key + ":x", key + ":q"}, "1", "10", "1", "0", grant).Err()
		if !redis.HasErrorPrefix(err, "leasequota: bad argument: grant") {
			t.Errorf("grant %q: %v, want a bad argument error", grant, err)
		}
	}
	if m, _ := rdb.HGetAll(ctx, key).Result(); len(m) != 2 || m["tk"] != "5" {
		t.Errorf("bad grant ids changed the bucket: %v", m)
	}
}

func TestCorruptBucket(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	key := c.Key("t")
	if err := rdb.HSet(ctx, key, "tk", "garbage", "ts", "1").Err(); err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 1, Burst: 10}
	if _, err := c.Acquire(ctx, "t", lim, 1); err == nil || !strings.Contains(err.Error(), "corrupt bucket") {
		t.Fatalf("Acquire on a corrupt bucket: %v", err)
	}
	if _, err := c.Release(ctx, "t", lim, 1, 0); err == nil || !strings.Contains(err.Error(), "corrupt bucket") {
		t.Fatalf("Release on a corrupt bucket: %v", err)
	}
	if v, _ := rdb.HGet(ctx, key, "tk").Result(); v != "garbage" {
		t.Fatalf("corrupt bucket was overwritten: %q", v)
	}
	// Numbers no call writes: refused as corrupt, nothing written. An
	// infinite ts was taken, stored as %d of it, and the key PERSISTed.
	for _, f := range [][2]string{{"5", "inf"}, {"5", "-inf"}, {"5", "1e300"}, {"5", "-1"}, {"inf", "1"}, {"-inf", "1"}} {
		if err := rdb.HSet(ctx, key, "tk", f[0], "ts", f[1]).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(ctx, "t", lim, 1); err == nil || !strings.Contains(err.Error(), "corrupt bucket") {
			t.Errorf("Acquire on tk %s, ts %s: %v, want a corrupt bucket", f[0], f[1], err)
		}
		if m, _ := rdb.HGetAll(ctx, key).Result(); m["tk"] != f[0] || m["ts"] != f[1] {
			t.Errorf("the bucket of tk %s, ts %s was overwritten: %v", f[0], f[1], m)
		}
	}
	// A history of one number, the burst alone, is unreadable: an
	// unknown past, not an error, on a full bucket too (history_at read
	// its missing second number and the script failed).
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, key, "tk", "10", "ts", "1", "h", string([]byte{10})).Err(); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Acquire(ctx, "t", lim, 1); err != nil || g.Granted != 1 {
		t.Errorf("Acquire on a full bucket whose history is the burst alone: %+v, %v", g, err)
	}
	// An entry of the previous layout after the bucket's time is
	// unreadable too: a release and an acquire go on as on an unknown
	// past. It kept the call's own entry out and packed a negative gap,
	// which failed after the release had recorded its id (a retry would
	// have been credited nothing).
	ids, err := NewClient(rdb, c.prefix, WithInstance("me", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(now.UnixMicro(), 10)
	later := strconv.FormatInt(now.UnixMicro()+3600e6, 10)
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, key, "tk", "5", "ts", ts, "hb", "10", "p1", later+":9").Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := ids.Release(ctx, "t", lim, 1, time.Second); err != nil || r.Credited != 0 {
		t.Errorf("Release into a bucket with an entry after its time: %+v, %v; want nothing credited (an unknown past)", r, err)
	}
	if err := rdb.HSet(ctx, key, "hb", "10", "p1", later+":9").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "t", lim, 1); err != nil {
		t.Errorf("Acquire on a bucket with an entry after its time: %v", err)
	}
	// A key of another type is an error of that tenant only.
	if err := rdb.Set(ctx, c.Key("str"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := c.AcquireMany(ctx, []Request{{Tenant: "str", Limits: lim, Want: 1}, {Tenant: "fine", Limits: lim, Want: 1}}, nil)
	if err != nil || !redis.HasErrorPrefix(errors.Unwrap(res[0].Err), "WRONGTYPE") || res[1].Err != nil {
		t.Fatalf("AcquireMany with a WRONGTYPE key: %v / %+v", err, res)
	}
}

func TestStoredState(t *testing.T) {
	// The stored fields are what doc.go says: tk round-trips exactly, ts is
	// the bucket time of the last call in microseconds, and the level
	// history holds the level before each debit (the first call's, a full
	// bucket, at its time; the second's, lower, rounded up, after it),
	// packed in h: the varints burst, 2(code of burst - code of the oldest
	// level), the drop in codes to the second level, the gap between the
	// two calls (µs), and the second call's distance to ts (0).
	ctx := context.Background()
	c, rdb, _ := setup(t)
	g0, err := c.Acquire(ctx, "t", Limits{Rate: 3, Burst: 10}, 10)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Acquire(ctx, "t", Limits{Rate: 3, Burst: 10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rdb.HGetAll(ctx, c.Key("t")).Result()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := strconv.ParseFloat(m["tk"], 64)
	if err != nil || tk != g.Tokens {
		t.Fatalf("tk %q, want %v", m["tk"], g.Tokens)
	}
	if m["ts"] != strconv.FormatInt(g.ServerTime.UnixMicro(), 10) {
		t.Fatalf("ts %q, want %d", m["ts"], g.ServerTime.UnixMicro())
	}
	want := map[string]string{
		"tk": m["tk"], "ts": m["ts"],
		"h": string(binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(nil,
			10), 0), uint64(peaks.Code(10)-peaks.Code(tk))), uint64(g.ServerTime.UnixMicro()-g0.ServerTime.UnixMicro())), 0)),
	}
	if len(m) != len(want) {
		t.Fatalf("fields %v, want %v", m, want)
	}
	for f, v := range want {
		if m[f] != v {
			t.Errorf("field %s = %q, want %q (all: %v)", f, m[f], v, m)
		}
	}
}

// TestScriptsRefuseWindowsBeyondPEXPIRE: the release's dedup window and
// the acquire's registry window, numbers PEXPIRE takes as %d, are refused
// beyond 1e15 ms (as roster.lua's). 1e300 was taken: %d of it is
// -2^63, a PEXPIRE that deleted the key just written, so the applied
// release ids were gone and a retried release was credited again (the
// same 50 tokens twice), and the acquire's registry entry was gone.
func TestScriptsRefuseWindowsBeyondPEXPIRE(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	lim := Limits{Rate: 1e-9, Burst: 100}
	key := c.Key("dedup")
	keys := []string{key, ReleasesKey(key), QuotaKey(key)}
	var g Grant
	for range 2 {
		var err error
		if g, err = c.Acquire(ctx, "dedup", lim, 50); err != nil || g.Granted != 50 {
			t.Fatalf("acquire: %+v, %v", g, err)
		}
	}
	id := strconv.FormatUint(uint64(g.ID()), 10) // the second grant's
	credited := 0.0
	for try := range 2 {
		r, err := parseRelease(releaseScript.run(ctx, rdb, keys, "1e-9", "100", "50", "1000", id, "rid-1", "1e300"), 50)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("release %d: %v, want credited or a bad argument", try, err)
			}
			continue
		}
		credited += r.Credited
	}
	if credited > 50 {
		t.Errorf("one release of 50 tokens (id rid-1) sent twice: credited %v", credited)
	}
	ikey := InstancesKey(c.Key("reg"))
	err := acquireScript.run(ctx, rdb, []string{c.Key("reg"), ikey, QuotaKey(c.Key("reg"))}, "1", "100", "1", "a", "1e300", "1").Err()
	if err == nil {
		if n, _ := rdb.Exists(ctx, ikey).Result(); n != 1 {
			t.Errorf("an acquire registering with window 1e300 ms: the registry is gone")
		}
	} else if !redis.HasErrorPrefix(err, "leasequota: bad argument") {
		t.Errorf("window 1e300: %v, want a bad argument or a registry kept", err)
	}
}
