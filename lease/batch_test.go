package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// setupBatch returns a Client of instance id with WithBatch(n) on the
// shared server under a fresh prefix, and the hook counting what it sends.
func setupBatch(t *testing.T, id string, n int) (*Client, *counter) {
	t.Helper()
	h := &counter{}
	scripted := redisserver.Client(t)
	scripted.AddHook(h)
	c, err := NewClient(scripted, redisserver.Prefix(t), WithInstance(id, time.Minute), WithBatch(n))
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// TestBatchMatchesSingles runs the same rounds of AcquireMany through a
// client that sends a call per tenant and one that sends 4 tenants per
// call, each in its own keyspace: every tenant gets the same grants,
// shares, instance counts and overrides, and the batches go as
// ceil(tenants / 4) script calls in one pipeline.
func TestBatchMatchesSingles(t *testing.T) {
	ctx := context.Background()
	single, _ := setupBatch(t, "i1", 1)
	batch, h := setupBatch(t, "i1", 4)
	// A second instance on every tenant, so that shares are split.
	other1, _ := NewClient(redisserver.Client(t), single.prefix, WithInstance("i2", time.Minute))
	other4, _ := NewClient(redisserver.Client(t), batch.prefix, WithInstance("i2", time.Minute))

	// Rates so low that the time between the two clients' calls refills
	// nothing that counts.
	const tenants = 10
	reqs := make([]Request, tenants)
	for i := range reqs {
		reqs[i] = Request{
			Tenant: fmt.Sprintf("t%d", i),
			Limits: Limits{Rate: 0.001 * float64(i+1), Burst: int64(10 + 7*i)},
			Want:   int64(3 + i),
			Demand: float64(5 * i),
		}
	}
	for _, c := range []*Client{single, batch} {
		if _, err := c.SetOverride(ctx, "t3", reqs[3].Limits, Override{Rate: 0.002, Burst: 40}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 4 {
		for _, o := range []*Client{other1, other4} {
			if _, err := o.AcquireMany(ctx, reqs[:tenants/2], nil); err != nil {
				t.Fatal(err)
			}
		}
		h.reset()
		want, err := single.AcquireMany(ctx, reqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := batch.AcquireMany(ctx, reqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, pipes := h.snapshot(); len(pipes) != 1 || len(pipes[0]) != 3 {
			t.Fatalf("round %d: pipelines %v, want one of 3 calls (4 + 4 + 2 tenants)", round, pipeLens(pipes))
		}
		for i := range reqs {
			w, g := want[i], got[i]
			if w.Err != nil || g.Err != nil {
				t.Fatalf("round %d, %s: single %v, batch %v", round, reqs[i].Tenant, w.Err, g.Err)
			}
			wg, gg := w.Grant, g.Grant
			if wg.Granted != gg.Granted || wg.Instances != gg.Instances || math.Abs(wg.Share-gg.Share) > 1e-9 ||
				math.Abs(wg.Tokens-gg.Tokens) > 0.05 || (wg.Override == nil) != (gg.Override == nil) ||
				(wg.Override != nil && *wg.Override != *gg.Override) {
				t.Errorf("round %d, %s:\nsingle %+v\nbatch  %+v", round, reqs[i].Tenant, wg, gg)
			}
			if gg.ServerTime.IsZero() {
				t.Errorf("round %d, %s: no server time", round, reqs[i].Tenant)
			}
		}
	}
}

// TestBatchIsolatesTenants: in one batch, a tenant whose key holds
// another type, or whose request is invalid, fails alone; a tenant named
// twice is acquired for twice, in order, at distinct times.
func TestBatchIsolatesTenants(t *testing.T) {
	ctx := context.Background()
	c, h := setupBatch(t, "i1", 8)
	rdb := redisserver.Client(t)
	if err := rdb.Set(ctx, c.Key("str"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, QuotaKey(c.Key("qstr")), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 0.001, Burst: 10}
	reqs := []Request{
		{Tenant: "a", Limits: lim, Want: 4},
		{Tenant: "str", Limits: lim, Want: 1},
		{Tenant: "bad", Limits: Limits{Rate: -1, Burst: 10}, Want: 1},
		{Tenant: "a", Limits: lim, Want: 10},
		{Tenant: "qstr", Limits: lim, Want: 1},
		{Tenant: "b", Limits: lim, Want: 2},
	}
	res, err := c.AcquireMany(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, pipes := h.snapshot(); len(pipes) != 1 || len(pipes[0]) != 1 {
		t.Fatalf("pipelines %v, want one call for the 5 valid requests", pipeLens(pipes))
	}
	if res[0].Err != nil || res[0].Grant.Granted != 4 {
		t.Errorf("a: %+v", res[0])
	}
	if res[3].Err != nil || res[3].Grant.Granted != 6 || !res[3].Grant.ServerTime.After(res[0].Grant.ServerTime) {
		t.Errorf("a again: %+v, want the 6 left, after %v", res[3], res[0].Grant.ServerTime)
	}
	if res[5].Err != nil || res[5].Grant.Granted != 2 {
		t.Errorf("b: %+v", res[5])
	}
	for _, i := range []int{1, 4} {
		if !redis.HasErrorPrefix(errors.Unwrap(res[i].Err), "WRONGTYPE") {
			t.Errorf("%s: %v, want its WRONGTYPE alone", reqs[i].Tenant, res[i].Err)
		}
	}
	if exists(t, rdb, c.Key("qstr")) {
		t.Errorf("qstr's failed acquire created its bucket")
	}
	if !errors.Is(res[2].Err, ErrBadRequest) {
		t.Errorf("bad: %v, want ErrBadRequest", res[2].Err)
	}
}

// TestBatchAfterScriptFlush: a batch sent to a server that lost the
// script is sent again with EVAL, once.
func TestBatchAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	c, h := setupBatch(t, "i1", 4)
	rdb := redisserver.Client(t)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 1, Burst: 10}
	reqs := []Request{{Tenant: "a", Limits: lim, Want: 1}, {Tenant: "b", Limits: lim, Want: 2}, {Tenant: "c", Limits: lim, Want: 3}}
	res, err := c.AcquireMany(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Grant.Granted != reqs[i].Want {
			t.Errorf("%s: %+v", reqs[i].Tenant, r)
		}
	}
	_, pipes := h.snapshot()
	if len(pipes) != 2 || strings.Join(pipes[0], ",") != "evalsha" || strings.Join(pipes[1], ",") != "eval" {
		t.Fatalf("pipelines %v, want one EVALSHA, then one EVAL", pipes)
	}
}

// TestBatchArguments: WithBatch wants n >= 1, and the script refuses a
// batch whose keys and arguments do not come in threes and eights.
func TestBatchArguments(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := NewClient(redisserver.Client(t), "p:", WithBatch(n)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("WithBatch(%d): %v, want ErrBadRequest", n, err)
		}
	}
	ctx := context.Background()
	rdb := redisserver.Client(t)
	p := redisserver.Prefix(t)
	for _, tc := range []struct {
		keys []string
		args []interface{}
	}{
		{[]string{p + "a", p + "ai", p + "aq", p + "b"}, []interface{}{1, 10, 1}},
		{[]string{p + "a", p + "ai", p + "aq", p + "b", p + "bi", p + "bq"}, []interface{}{1, 10, 1, "", "", "", "", "", 1, 10, 1}},
	} {
		err := rdb.Eval(ctx, acquireScript.src, tc.keys, tc.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "a batch wants 3 keys and 8 arguments per tenant") {
			t.Errorf("%d keys, %d arguments: %v", len(tc.keys), len(tc.args), err)
		}
	}
	if n, err := rdb.Exists(ctx, p+"a", p+"b").Result(); err != nil || n != 0 {
		t.Errorf("a refused batch wrote keys: %d, %v", n, err)
	}
}
