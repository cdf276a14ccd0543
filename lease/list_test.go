package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// scanHook counts the SCANs a client sends and records the keys of the
// HMGETs, in order.
type scanHook struct {
	mu    sync.Mutex
	scans int
	read  []string
}

func (h *scanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			h.mu.Lock()
			h.scans++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *scanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			if c.Name() == "hmget" {
				h.read = append(h.read, fmt.Sprint(c.Args()[1]))
			}
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// readSoFar returns the keys the client has read so far.
func (h *scanHook) readSoFar() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]bool, len(h.read))
	for _, k := range h.read {
		m[k] = true
	}
	return m
}

// listClient returns a Client under prefix on the shared server whose
// SCANs and reads h sees.
func listClient(t *testing.T, prefix string) (*Client, *scanHook) {
	t.Helper()
	rdb := redisserver.Client(t)
	h := &scanHook{}
	rdb.AddHook(h)
	c, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// setOverrides stores want on c, eight at a time.
func setOverrides(t *testing.T, c *Client, want map[string]Override) {
	t.Helper()
	var g errgroup.Group
	g.SetLimit(8)
	for tenant, o := range want {
		g.Go(func() error {
			_, err := c.SetOverride(context.Background(), tenant, Limits{Rate: 10, Burst: 10}, o)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// listAll lists c's overrides, failing on any error, and returns them by
// tenant. A tenant listed twice must be listed with the same override.
func listAll(t *testing.T, c *Client) map[string]ListedOverride {
	t.Helper()
	got := map[string]ListedOverride{}
	for lo, err := range c.ListOverrides(context.Background()) {
		if err != nil {
			t.Fatalf("listing: %v", err)
		}
		if prev, ok := got[lo.Tenant]; ok && prev != lo {
			t.Fatalf("%.40q listed twice, differently: %+v, %+v", lo.Tenant, prev, lo)
		}
		got[lo.Tenant] = lo
	}
	return got
}

// TestListOverrides lists more overrides than a SCAN page holds, of short,
// odd and long (hashed) tenant names, and nothing else: not a bucket
// without an override, not a deleted override, not another prefix's.
func TestListOverrides(t *testing.T) {
	ctx := context.Background()
	prefix := redisserver.Prefix(t)
	c, h := listClient(t, prefix)
	want := map[string]Override{}
	for i := range 1500 {
		want[fmt.Sprintf("t%04d", i)] = Override{Rate: float64(i + 1), Burst: int64(i + 1)}
	}
	long := strings.Repeat("L", 300)
	for _, tenant := range []string{"", "acme", "with space/ünï{}%*", long, long + "\x00\xff", strings.Repeat("é", 65)} {
		want[tenant] = Override{Rate: 0.5, Burst: 7, MinLease: 2, MaxLease: 3, LeaseTTL: 1500 * time.Millisecond, Mode: 2}
	}
	setOverrides(t, c, want)
	// Neither a bucket without an override, nor a deleted override, nor an
	// override under a prefix that starts with this one is listed.
	if _, err := c.Acquire(ctx, "bucket only", Limits{Rate: 1, Burst: 5}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetOverride(ctx, "gone", Limits{Rate: 1, Burst: 5}, Override{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteOverride(ctx, "gone", Limits{Rate: 1, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	other, _ := listClient(t, prefix+"sub:")
	if _, err := other.SetOverride(ctx, "other", Limits{Rate: 1, Burst: 5}, Override{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}

	got := listAll(t, c)
	if len(got) != len(want) {
		t.Errorf("listed %d tenants, want %d", len(got), len(want))
	}
	for tenant, o := range want {
		lo, ok := got[tenant]
		if !ok {
			t.Errorf("%.40q (%d bytes) not listed", tenant, len(tenant))
			continue
		}
		if lo.Override != o || lo.Key != QuotaKey(Key(prefix, tenant)) {
			t.Errorf("%.40q listed as %+v, want %+v under %q", tenant, lo, o, QuotaKey(Key(prefix, tenant)))
		}
	}
	if h.scans < 2 {
		t.Errorf("%d SCAN calls: the listing never went past one page", h.scans)
	}
	t.Logf("%d overrides in %d SCAN calls", len(got), h.scans)
}

// TestListOverridesGlobPrefix: a prefix's glob characters match only
// themselves, so prefixes that a pattern would take for wider ones list
// only their own overrides.
func TestListOverridesGlobPrefix(t *testing.T) {
	ctx := context.Background()
	base := redisserver.Prefix(t)
	prefixes := []string{"a*", "ab", "x?", "xy", "[ab]", "a", "b", `\`, `\*`, "c]", "*", ""}
	clients := map[string]*Client{}
	for _, p := range prefixes {
		c, _ := listClient(t, base+p)
		clients[p] = c
		if _, err := c.SetOverride(ctx, "of "+p, Limits{Rate: 1, Burst: 5}, Override{Rate: 1, Burst: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range prefixes {
		got := listAll(t, clients[p])
		if _, ok := got["of "+p]; len(got) != 1 || !ok {
			t.Errorf("prefix %q lists %v, want only its own tenant %q", base+p, got, "of "+p)
		}
	}
}

// TestListOverridesCanceled: a ctx done mid-listing ends it with its
// error.
func TestListOverridesCanceled(t *testing.T) {
	c, _ := listClient(t, redisserver.Prefix(t))
	want := map[string]Override{}
	for i := range 50 {
		want[fmt.Sprint(i)] = Override{Rate: 1, Burst: 1}
	}
	setOverrides(t, c, want)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listed, errs := 0, 0
	for lo, err := range c.ListOverrides(ctx) {
		if err != nil {
			errs++
			if !errors.Is(err, context.Canceled) || lo != (ListedOverride{}) {
				t.Errorf("after cancel: %+v, %v; want a zero value and context.Canceled", lo, err)
			}
			continue
		}
		listed++
		cancel()
	}
	if listed != 1 || errs != 1 {
		t.Fatalf("listed %d and %d errors; want 1 listed, then one error", listed, errs)
	}
	// Canceled before it starts: only the error.
	for lo, err := range c.ListOverrides(ctx) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("listing with a done ctx yielded %+v, %v", lo, err)
		}
	}
}

// TestListOverridesDeletedWhileScanning deletes half the overrides after
// the first is listed: those never deleted are all listed, and a deleted
// one only if it had been read before it was deleted, never as a zero
// override.
func TestListOverridesDeletedWhileScanning(t *testing.T) {
	ctx := context.Background()
	prefix := redisserver.Prefix(t)
	c, h := listClient(t, prefix)
	rdb := redisserver.Client(t)
	want := map[string]Override{}
	for i := range 1200 {
		want[fmt.Sprintf("t%04d", i)] = Override{Rate: 1, Burst: int64(i + 1)}
	}
	setOverrides(t, c, want)
	deleted := map[string]bool{}
	var readBefore map[string]bool
	listed := map[string]bool{}
	for lo, err := range c.ListOverrides(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if lo.Override != want[lo.Tenant] {
			t.Fatalf("%q listed as %+v, want %+v", lo.Tenant, lo.Override, want[lo.Tenant])
		}
		listed[lo.Tenant] = true
		if readBefore != nil {
			if deleted[lo.Tenant] && !readBefore[lo.Key] {
				t.Errorf("%q listed, though deleted before it was read", lo.Tenant)
			}
			continue
		}
		readBefore = h.readSoFar()
		p := rdb.Pipeline()
		for tenant := range want {
			if tenant[len(tenant)-1]%2 == 1 && tenant != lo.Tenant {
				deleted[tenant] = true
				p.Del(ctx, QuotaKey(Key(prefix, tenant)))
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	missed, late := 0, 0
	for tenant := range want {
		switch {
		case !deleted[tenant] && !listed[tenant]:
			missed++
		case deleted[tenant] && listed[tenant]:
			late++
		}
	}
	if missed > 0 {
		t.Errorf("%d overrides never deleted were not listed", missed)
	}
	if late >= len(deleted) {
		t.Errorf("all %d deleted overrides were listed", late)
	}
	t.Logf("%d deleted, of which %d listed (read before the deletion)", len(deleted), late)
}
