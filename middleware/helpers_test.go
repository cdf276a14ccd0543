package middleware_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/middleware"
)

func TestMain(m *testing.M) { redisserver.Main(m) }

// leakCheck starts the package's shared Redis (whose goroutines live as
// long as the package), then makes the test fail if goroutines started
// during the test outlive it. It must be called first in the test: its
// check runs after every other cleanup.
func leakCheck(t testing.TB) {
	t.Helper()
	redisserver.Shared(t)
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// testLog passes each line written to it to t.Log, until the test's
// cleanups are done (a limiter's goroutines may log until it is closed).
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger returns a logger that writes to t.Log, for leasequota.WithLogger:
// tests stay quiet unless they fail or run with -v. Create it before the
// limiter, so that it outlives the limiter's Close in the cleanups.
func testLogger(t testing.TB) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, nil))
}

// newLimiter returns a Limiter on the shared Redis with a key prefix of
// its own, logging to t.Log, closed when the test ends. Its Redis calls
// get a second and a tenant's first request waits up to 10 s for its
// first lease (opts may set either): the tests here send a tenant's first
// request expecting it admitted, often from a burst of 1 that refills in
// minutes. With the defaults (50 ms a call, a cold-start wait of 100 ms)
// a loaded machine lost that request: denied cold_start while the lease
// came late, or its token spent in Redis by a call that timed out before
// it read the reply, so that the bucket was empty for the rest of the test.
func newLimiter(t testing.TB, opts ...leasequota.Option) *leasequota.Limiter {
	t.Helper()
	logger := testLogger(t)
	c := redisserver.Client(t)
	opts = append([]leasequota.Option{leasequota.WithKeyPrefix(redisserver.Prefix(t)), leasequota.WithLogger(logger),
		leasequota.WithRedisTimeout(time.Second), leasequota.WithColdStartWait(10 * time.Second)}, opts...)
	l, err := leasequota.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, l)
	return l
}

// closeAtEnd closes l when the test ends, giving its Close 5 s, and fails
// the test if Close fails.
func closeAtEnd(t testing.TB, l *leasequota.Limiter) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// deadLimiter returns a Limiter with quota q and failure mode mode (and
// opts) on a Redis that is down for good, closed when the test ends.
func deadLimiter(t testing.TB, q leasequota.Quota, mode leasequota.FailureMode, opts ...leasequota.Option) *leasequota.Limiter {
	t.Helper()
	logger := testLogger(t)
	s := redisserver.StartServer(t)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c := s.Client()
	t.Cleanup(func() { c.Close() })
	opts = append([]leasequota.Option{leasequota.WithDefaultQuota(q), leasequota.WithRedisTimeout(20 * time.Millisecond),
		leasequota.WithFailureMode(mode), leasequota.WithLogger(logger)}, opts...)
	l, err := leasequota.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Close(ctx) // cannot return the (no) tokens to a dead Redis
	})
	return l
}

// decided is one decision reported by the middleware's hook.
type decided struct {
	key string
	d   leasequota.Decision
}

// hookLog records the decisions of a middleware.
type hookLog struct {
	mu  sync.Mutex
	all []decided
}

func (h *hookLog) option() middleware.Option {
	return middleware.WithDecisionHook(func(_ *http.Request, key string, d leasequota.Decision) {
		h.mu.Lock()
		h.all = append(h.all, decided{key, d})
		h.mu.Unlock()
	})
}

func (h *hookLog) last(t testing.TB) decided {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.all) == 0 {
		t.Fatal("no decision reported")
	}
	return h.all[len(h.all)-1]
}

func (h *hookLog) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.all)
}

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok")
})

// serve runs the middleware in front of okHandler on a loopback
// http.Server, closed when the test ends.
func serve(t testing.TB, l *leasequota.Limiter, opts ...middleware.Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(middleware.New(l, opts...)(okHandler))
	t.Cleanup(srv.Close)
	return srv
}

// result is a response with its body read.
type result struct {
	status int
	header http.Header
	body   []byte
}

// get sends GET / with the given header lines ("Name", "value", ...).
func get(t testing.TB, srv *httptest.Server, header ...string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, body}
}

// policy is a parsed RateLimit-Policy member.
type policy struct {
	name string
	q, w int64
}

// rateLimit is a parsed RateLimit member.
type rateLimit struct {
	name string
	r    int64
	t    int64
	hasT bool
}

// parseOne parses field name of h as an RFC 9651 List and returns its one
// member, an Item whose value is a String, and its parameters, which must
// be Integers among allowed (required ones first).
func parseOne(t testing.TB, h http.Header, name string, required []string, optional ...string) (string, map[string]int64) {
	t.Helper()
	values := h.Values(name)
	if len(values) == 0 {
		t.Fatalf("no %s field", name)
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%s: %q is not an sf-list: %v", name, values, err)
	}
	if len(list) != 1 {
		t.Fatalf("%s: %q has %d members, want 1", name, values, len(list))
	}
	item, ok := list[0].(httpsfv.Item)
	if !ok {
		t.Fatalf("%s: %q: member is %T, want an Item", name, values, list[0])
	}
	id, ok := item.Value.(string)
	if !ok {
		t.Fatalf("%s: %q: item is %T, want a String", name, values, item.Value)
	}
	params := map[string]int64{}
	allowed := map[string]bool{}
	for _, k := range append(append([]string{}, required...), optional...) {
		allowed[k] = true
	}
	for _, k := range item.Params.Names() {
		if !allowed[k] {
			t.Fatalf("%s: %q: unexpected parameter %q", name, values, k)
		}
		v, _ := item.Params.Get(k)
		n, ok := v.(int64)
		if !ok {
			t.Fatalf("%s: %q: parameter %s is %T, want an Integer", name, values, k, v)
		}
		if n < 0 {
			t.Fatalf("%s: %q: parameter %s is negative", name, values, k)
		}
		params[k] = n
	}
	for _, k := range required {
		if _, ok := params[k]; !ok {
			t.Fatalf("%s: %q: no %s parameter", name, values, k)
		}
	}
	return id, params
}

func parsePolicy(t testing.TB, h http.Header) policy {
	t.Helper()
	id, p := parseOne(t, h, "RateLimit-Policy", []string{"q", "w"})
	return policy{id, p["q"], p["w"]}
}

func parseRateLimit(t testing.TB, h http.Header) rateLimit {
	t.Helper()
	id, p := parseOne(t, h, "RateLimit", []string{"r"}, "t")
	tv, hasT := p["t"]
	return rateLimit{id, p["r"], tv, hasT}
}

// problemBody is an RFC 9457 problem.
type problemBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// checkProblem checks that res is an application/problem+json answer of
// the given status and type, and returns it.
func checkProblem(t testing.TB, res result, status int, typ string) problemBody {
	t.Helper()
	if res.status != status {
		t.Fatalf("status %d, want %d (body %s)", res.status, status, res.body)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.Unmarshal(res.body, &p); err != nil {
		t.Fatalf("body %s: %v", res.body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s, status %d, a title and a detail", p, typ, status)
	}
	return p
}

// check429 checks a quota-exceeded answer: problem body, Retry-After equal
// to RateLimit's t (>= 1), and the policy fields. It returns Retry-After.
func check429(t testing.TB, res result, want policy) int64 {
	t.Helper()
	p := checkProblem(t, res, http.StatusTooManyRequests, middleware.ProblemQuotaExceeded)
	if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != want.name {
		t.Fatalf("violated-policies %q, want [%q]", p.ViolatedPolicies, want.name)
	}
	if got := parsePolicy(t, res.header); got != want {
		t.Fatalf("RateLimit-Policy %+v, want %+v", got, want)
	}
	rl := parseRateLimit(t, res.header)
	if rl.name != want.name || !rl.hasT || rl.t < 1 || rl.r > want.q {
		t.Fatalf("RateLimit %+v on a 429, want policy %q, t >= 1, r <= %d", rl, want.name, want.q)
	}
	ra, err := strconv.ParseInt(res.header.Get("Retry-After"), 10, 64)
	if err != nil {
		t.Fatalf("Retry-After %q: %v", res.header.Get("Retry-After"), err)
	}
	if ra != rl.t {
		t.Fatalf("Retry-After %d, RateLimit t %d: want them equal", ra, rl.t)
	}
	return ra
}

// check200 checks an admitted answer and its fields, and returns r.
func check200(t testing.TB, res result, want policy) int64 {
	t.Helper()
	if res.status != http.StatusOK || string(res.body) != "ok" {
		t.Fatalf("status %d body %q, want 200 ok", res.status, res.body)
	}
	if got := parsePolicy(t, res.header); got != want {
		t.Fatalf("RateLimit-Policy %+v, want %+v", got, want)
	}
	rl := parseRateLimit(t, res.header)
	if rl.name != want.name || !rl.hasT || rl.t != 0 || rl.r > want.q {
		t.Fatalf("RateLimit %+v on a 200, want policy %q, t=0, r <= %d", rl, want.name, want.q)
	}
	if ra := res.header.Get("Retry-After"); ra != "" {
		t.Fatalf("Retry-After %q on a 200", ra)
	}
	return rl.r
}
