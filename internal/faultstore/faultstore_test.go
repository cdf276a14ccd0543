package faultstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

var lim = lease.Limits{Rate: 1, Burst: 10}

func acquire(ctx context.Context, v lease.Store) error {
	_, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 1}}, nil)
	return err
}

// TestDownAndUp: an outage fails every call without reaching the store,
// and Calls counts them apart from those that reached it.
func TestDownAndUp(t *testing.T) {
	s := faultstore.New(memstore.New())
	v, err := s.Instance("a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := acquire(ctx, v); err != nil {
		t.Fatal(err)
	}
	s.SetDown(nil)
	if err := acquire(ctx, v); !errors.Is(err, faultstore.ErrDown) {
		t.Fatalf("acquire while down: %v, want ErrDown", err)
	}
	other := errors.New("boom")
	s.SetDown(other)
	if res := v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 1}}); !errors.Is(res[0].Err, other) {
		t.Fatalf("release while down: %v, want the error given to SetDown", res[0].Err)
	}
	s.SetUp()
	if err := acquire(ctx, v); err != nil {
		t.Fatalf("acquire after SetUp: %v", err)
	}
	if made, reached := s.Calls(faultstore.OpAcquire); made != 3 || reached != 2 {
		t.Errorf("acquires made %d, reached %d; want 3 and 2", made, reached)
	}
	if made, reached := s.Calls(faultstore.OpRelease); made != 1 || reached != 0 {
		t.Errorf("releases made %d, reached %d; want 1 and 0", made, reached)
	}
}

// TestDelayAndPause: Delay holds each call for its duration, Pause until
// its end; a call whose ctx ends first fails with ctx.Err() and does not
// reach the store.
func TestDelayAndPause(t *testing.T) {
	s := faultstore.New(memstore.New())
	v, err := s.Instance("a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const d = 20 * time.Millisecond
	s.SetHook(faultstore.Delay(d))
	start := time.Now()
	if err := acquire(ctx, v); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("a call under Delay(%v) took %v", d, took)
	}
	s.SetHook(faultstore.Pause(time.Now().Add(time.Hour)))
	short, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := acquire(short, v); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call held past its deadline: %v, want DeadlineExceeded", err)
	}
	s.SetHook(faultstore.Pause(time.Now().Add(-time.Second))) // a pause that has ended
	if err := acquire(ctx, v); err != nil {
		t.Errorf("a call after the pause: %v", err)
	}
	if made, reached := s.Calls(faultstore.OpAcquire); made != 3 || reached != 2 {
		t.Errorf("acquires made %d, reached %d; want 3 and 2", made, reached)
	}
}

// TestHang: Hang holds the calls of its kind until their deadline, and
// lets the others through.
func TestHang(t *testing.T) {
	s := faultstore.New(memstore.New())
	v, err := s.Instance("a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.SetHook(faultstore.Hang(faultstore.OpAcquire))
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := acquire(short, v); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a hung acquire: %v, want DeadlineExceeded", err)
	}
	if _, err := v.QuotaVersion(context.Background()); err != nil {
		t.Errorf("a quota-version read under Hang(OpAcquire): %v, want it through", err)
	}
	if made, reached := s.Calls(faultstore.OpAcquire); made != 1 || reached != 0 {
		t.Errorf("acquires made %d, reached %d; want 1 and 0", made, reached)
	}
}

// TestHookSeesTheCall: a hook is told the instance, the kind of call and
// its tenants, and may fail the calls it picks by them, the others
// reaching the store; an outage fails a call at once, before the hook.
func TestHookSeesTheCall(t *testing.T) {
	s := faultstore.New(memstore.New())
	v, err := s.Instance("a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var seen []faultstore.Call
	boom := errors.New("boom")
	s.SetHook(func(_ context.Context, c faultstore.Call) error {
		seen = append(seen, faultstore.Call{Instance: c.Instance, Op: c.Op, Tenants: slices.Clone(c.Tenants)})
		if slices.Contains(c.Tenants, "bad") {
			return boom
		}
		return nil
	})
	ctx := context.Background()
	reqs := []lease.Request{{Tenant: "x", Limits: lim, Want: 1}, {Tenant: "bad", Limits: lim, Want: 1}}
	res, err := v.AcquireMany(ctx, reqs, nil)
	if !errors.Is(err, boom) {
		t.Errorf("an acquire naming the tenant the hook fails: %v, want its error", err)
	}
	// lease.Store's contract: a result a request, the batch's error in
	// each.
	if len(res) != len(reqs) || !errors.Is(res[0].Err, boom) || !errors.Is(res[1].Err, boom) {
		t.Errorf("the failed acquire's results: %+v, want %d, each with the hook's error", res, len(reqs))
	}
	if res := v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "x", Limits: lim, Amount: 1}}); res[0].Err != nil {
		t.Errorf("a release the hook lets through: %v", res[0].Err)
	}
	if _, err := v.GetOverride(ctx, "bad"); !errors.Is(err, boom) {
		t.Errorf("GetOverride of the tenant the hook fails: %v, want its error", err)
	}
	if _, err := v.QuotaVersion(ctx); err != nil {
		t.Errorf("QuotaVersion: %v", err)
	}
	want := []faultstore.Call{
		{Instance: "a", Op: faultstore.OpAcquire, Tenants: []string{"x", "bad"}},
		{Instance: "a", Op: faultstore.OpRelease, Tenants: []string{"x"}},
		{Instance: "a", Op: faultstore.OpOverride, Tenants: []string{"bad"}},
		{Instance: "a", Op: faultstore.OpVersion},
	}
	if !slices.EqualFunc(seen, want, func(a, b faultstore.Call) bool {
		return a.Instance == b.Instance && a.Op == b.Op && slices.Equal(a.Tenants, b.Tenants)
	}) {
		t.Errorf("the hook saw %+v, want %+v", seen, want)
	}
	if made, reached := s.Calls(faultstore.OpAcquire); made != 1 || reached != 0 {
		t.Errorf("acquires made %d, reached %d; want 1 and 0", made, reached)
	}
	// Down: the call fails at once, with the outage's error, and the hook
	// (which would hold it for an hour) does not run.
	s.SetHook(faultstore.Delay(time.Hour))
	s.SetDown(nil)
	if _, err := v.QuotaVersion(ctx); !errors.Is(err, faultstore.ErrDown) {
		t.Errorf("QuotaVersion while down: %v, want ErrDown", err)
	}
}

// TestRoster: a view of a store that keeps the fleet's roster keeps it
// too, its calls faulted as OpRoster; a view of one that does not has no
// roster.
func TestRoster(t *testing.T) {
	s := faultstore.New(memstore.New())
	v, err := s.Instance("a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	count := func() (int, error) { return v.(lease.InstanceCounter).CountInstances(ctx) }
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("CountInstances: %d, %v; want 1", n, err)
	}
	s.SetDown(nil)
	if _, err := count(); !errors.Is(err, faultstore.ErrDown) {
		t.Errorf("CountInstances while down: %v, want ErrDown", err)
	}
	if err := v.(lease.RosterLeaver).LeaveRoster(ctx); !errors.Is(err, faultstore.ErrDown) {
		t.Errorf("LeaveRoster while down: %v, want ErrDown", err)
	}
	s.SetUp()
	if err := v.(lease.RosterLeaver).LeaveRoster(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := s.Instance("b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := other.(lease.InstanceCounter).CountInstances(ctx); err != nil || n != 1 {
		t.Errorf("after a left the roster, b counts %d (%v), want 1", n, err)
	}
	if made, reached := s.Calls(faultstore.OpRoster); made != 5 || reached != 3 {
		t.Errorf("roster calls made %d, reached %d; want 5 and 3", made, reached)
	}

	bare := faultstore.New(noRoster{memstore.New()})
	bv, err := bare.Instance("a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := bv.(lease.InstanceCounter); ok {
		t.Error("a view of a store without a roster counts instances")
	}
	if _, ok := bv.(lease.RosterLeaver); ok {
		t.Error("a view of a store without a roster leaves one")
	}
}

// TestNodes: after SetNodes, the views are a Redis Cluster's, NodeOf
// answering as the function given; before it, and after SetNodes(nil),
// they have no NodeOf.
func TestNodes(t *testing.T) {
	type locator interface {
		NodeOf(ctx context.Context, tenant string) (string, bool)
	}
	s := faultstore.New(memstore.New())
	one, err := s.Instance("a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := one.(locator); ok {
		t.Error("a view made before SetNodes has NodeOf")
	}
	s.SetNodes(func(_ context.Context, tenant string) (string, bool) { return "n-" + tenant, true })
	v, err := s.Instance("a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	loc, ok := v.(locator)
	if !ok {
		t.Fatal("a view made after SetNodes has no NodeOf")
	}
	if node, ok := loc.NodeOf(context.Background(), "x"); node != "n-x" || !ok {
		t.Errorf("NodeOf(x) = %q, %v; want n-x, true", node, ok)
	}
	if _, ok := v.(lease.InstanceCounter); !ok {
		t.Error("a Cluster view of a store that keeps the roster has none")
	}
	s.SetNodes(nil)
	if v, err = s.Instance("a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.(locator); ok {
		t.Error("a view made after SetNodes(nil) has NodeOf")
	}
}

// noRoster hands out views that keep no roster: lease.Store alone.
type noRoster struct{ m *memstore.Store }

func (b noRoster) Instance(id string, window time.Duration) (lease.Store, error) {
	v, err := b.m.Instance(id, window)
	return struct{ lease.Store }{v}, err
}
