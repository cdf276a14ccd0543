// Package faultstore wraps the global buckets of Limiters (a Backend, such
// as *memstore.Store) with the faults of a network: an outage, a delay per
// call, and a hook that may fail or hold any call (Delay and Pause make
// the common ones; a hook of its own may pick calls by instance, kind or
// tenant). It counts the calls by kind. Tests of the root package and the
// syncer use it where Redis itself is not the subject, instead of a
// wrapper of their own for each fault.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// ErrDown is the error of every call while the store is down, unless
// SetDown gave another.
var ErrDown = errors.New("faultstore: store down")

// Op names a kind of store call.
type Op string

// The kinds of call, as Calls counts them.
const (
	OpAcquire  Op = "acquire"
	OpRelease  Op = "release"
	OpOverride Op = "override" // GetOverride, SetOverride, DeleteOverride
	OpVersion  Op = "version"  // QuotaVersion
	OpRoster   Op = "roster"   // CountInstances, LeaveRoster
	OpProbe    Op = "probe"    // ProbeWrite
)

// Backend is what a Store wraps: it hands out one view per instance.
type Backend interface {
	Instance(id string, window time.Duration) (lease.Store, error)
}

// A Call is what a Hook is told of one store call.
type Call struct {
	Instance string // the id the view was made for
	Op       Op
	// Tenants names the tenant of each request of an acquire or a
	// release, in order, and the one tenant of GetOverride, SetOverride
	// and DeleteOverride; it is empty for the other calls. The hook must
	// not keep or change it.
	Tenants []string
}

// A Hook runs before every call that the store is up for (an outage fails
// a call at once, without it); a non-nil error fails the call as a whole,
// without reaching the store. It may block (a delay) until ctx is done.
type Hook func(ctx context.Context, c Call) error

// Store wraps a Backend with faults. Its zero value is not usable: call
// New. It is safe for concurrent use.
type Store struct {
	inner Backend

	down   atomic.Pointer[error] // nil: up
	mu     sync.Mutex            // guards hook, nodeOf and calls
	hook   Hook
	nodeOf func(ctx context.Context, tenant string) (string, bool)
	// calls counts the calls by kind and whether they reached the store.
	calls map[Op]*[2]int64
}

// New wraps b.
func New(b Backend) *Store {
	return &Store{inner: b, calls: map[Op]*[2]int64{}}
}

// SetDown makes every call fail with err (ErrDown when err is nil) until
// SetUp: at once, as a Redis that refuses connections, before any hook.
func (s *Store) SetDown(err error) {
	if err == nil {
		err = ErrDown
	}
	s.down.Store(&err)
}

// SetUp ends an outage.
func (s *Store) SetUp() { s.down.Store(nil) }

// SetHook sets the hook run before each call (nil for none).
func (s *Store) SetHook(h Hook) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// SetNodes makes the views that Instance hands out from now on those of a
// Redis Cluster: they implement NodeOf(ctx, tenant) (node string, ok bool),
// the syncer's NodeLocator, by calling nodeOf; nil makes them one
// server's again. A hook picks a master's calls by Call.Tenants (the
// syncer sends each master its own calls). NodeOf is neither faulted nor
// counted: nodeOf is the look-up's whole behaviour, and may wait for its
// ctx as loading the slot map of an unreachable cluster does.
func (s *Store) SetNodes(nodeOf func(ctx context.Context, tenant string) (node string, ok bool)) {
	s.mu.Lock()
	s.nodeOf = nodeOf
	s.mu.Unlock()
}

// Delay returns a Hook that holds every call for d, as a slow network
// does, then lets it through. A call whose ctx is done first fails with
// ctx.Err() without reaching the store, as a client call that timed out.
func Delay(d time.Duration) Hook {
	return func(ctx context.Context, _ Call) error {
		return hold(ctx, d)
	}
}

// Pause returns a Hook that holds every call until the time until, then
// lets it through: Redis's CLIENT PAUSE, which holds the commands of every
// client until the pause ends. A call made after until is not held. A call
// whose ctx is done first fails with ctx.Err() without reaching the store.
func Pause(until time.Time) Hook {
	return func(ctx context.Context, _ Call) error {
		return hold(ctx, time.Until(until))
	}
}

// Hang returns a Hook that holds every call of kind op until its ctx is
// done, and fails it with ctx.Err(): a Redis that takes the command and
// answers nothing, so that the call ends at its deadline. Other calls go
// through.
func Hang(op Op) Hook {
	return func(ctx context.Context, c Call) error {
		if c.Op != op {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
}

// hold waits for d, or until ctx is done: then it returns ctx.Err().
func hold(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Calls returns how many calls of op were made, and how many of them
// reached the wrapped store.
func (s *Store) Calls(op Op) (made, reached int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.calls[op]; c != nil {
		return c[0], c[1]
	}
	return 0, 0
}

// Instance returns instance id's view of the wrapped store, with the
// faults of s. When the wrapped view keeps the fleet's roster
// (lease.InstanceCounter and lease.RosterLeaver, as memstore's and
// lease.Client's do), so does the returned one, its calls faulted as
// OpRoster; otherwise the returned view has neither. It implements
// NodeOf only after SetNodes.
func (s *Store) Instance(id string, window time.Duration) (lease.Store, error) {
	v, err := s.inner.Instance(id, window)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	w := &view{s: s, id: id, inner: v, nodeOf: s.nodeOf}
	s.mu.Unlock()
	r, hasRoster := v.(roster)
	w.roster = r
	// The returned value has only the methods of what it wraps: a caller
	// that asks for the roster, or for a Cluster's nodes, finds them
	// where the store behind it has them. ProbeWrite it always has, so
	// that a hook may fail it (a store without one answers it nil, as
	// the syncer takes a store without it).
	switch {
	case hasRoster && w.nodeOf != nil:
		return struct {
			lease.Store
			roster
			nodeLocator
			prober
		}{w, w, w, w}, nil
	case hasRoster:
		return struct {
			lease.Store
			roster
			prober
		}{w, w, w}, nil
	case w.nodeOf != nil:
		return struct {
			lease.Store
			nodeLocator
			prober
		}{w, w, w}, nil
	}
	return struct {
		lease.Store
		prober
	}{w, w}, nil
}

// prober is syncer.WriteProber, written again as nodeLocator is.
type prober interface {
	ProbeWrite(ctx context.Context) error
}

// enter runs the faults of one call and reports the error that fails it.
// tenants gives the call's tenants to a hook (see Call.Tenants): it is
// called only when there is one.
func (s *Store) enter(ctx context.Context, id string, op Op, tenants func() []string) error {
	s.mu.Lock()
	c := s.calls[op]
	if c == nil {
		c = new([2]int64)
		s.calls[op] = c
	}
	c[0]++
	h := s.hook
	s.mu.Unlock()
	if p := s.down.Load(); p != nil {
		return fmt.Errorf("faultstore: %s: %w", op, *p)
	}
	if h != nil {
		call := Call{Instance: id, Op: op}
		if tenants != nil {
			call.Tenants = tenants()
		}
		if err := h(ctx, call); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	c[1]++
	s.mu.Unlock()
	return nil
}

// view is one instance's view of a Store, with every method Instance may
// hand out: roster's when the wrapped view has them, NodeOf after
// SetNodes.
type view struct {
	s      *Store
	id     string
	inner  lease.Store
	roster roster // nil when inner keeps no roster
	nodeOf func(ctx context.Context, tenant string) (string, bool)
}

// tenantsOf gives the tenants of a call's requests to a hook.
func tenantsOf[R any](reqs []R, tenant func(R) string) func() []string {
	return func() []string {
		t := make([]string, len(reqs))
		for i, r := range reqs {
			t[i] = tenant(r)
		}
		return t
	}
}

// one gives a call on one tenant's name to a hook.
func one(tenant string) func() []string { return func() []string { return []string{tenant} } }

func (v *view) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if err := v.s.enter(ctx, v.id, OpAcquire, tenantsOf(reqs, func(r lease.Request) string { return r.Tenant })); err != nil {
		// Every request failed, as lease.Store says: the error in each
		// result too. Without results, the syncer's acquire of one
		// (urgent refills) took the fault for a bad reply, which is
		// Redis answering, not failing.
		results = results[:0]
		for range reqs {
			results = append(results, lease.Result{Err: err})
		}
		return results, err
	}
	return v.inner.AcquireMany(ctx, reqs, results)
}

func (v *view) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	if err := v.s.enter(ctx, v.id, OpRelease, tenantsOf(reqs, func(r lease.ReleaseRequest) string { return r.Tenant })); err != nil {
		out := make([]lease.ReleaseResult, len(reqs))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return v.inner.ReleaseMany(ctx, reqs)
}

func (v *view) GetOverride(ctx context.Context, tenant string) (*lease.Override, error) {
	if err := v.s.enter(ctx, v.id, OpOverride, one(tenant)); err != nil {
		return nil, err
	}
	return v.inner.GetOverride(ctx, tenant)
}

func (v *view) SetOverride(ctx context.Context, tenant string, base lease.Limits, o lease.Override) (float64, error) {
	if err := v.s.enter(ctx, v.id, OpOverride, one(tenant)); err != nil {
		return 0, err
	}
	return v.inner.SetOverride(ctx, tenant, base, o)
}

func (v *view) DeleteOverride(ctx context.Context, tenant string, base lease.Limits) (float64, error) {
	if err := v.s.enter(ctx, v.id, OpOverride, one(tenant)); err != nil {
		return 0, err
	}
	return v.inner.DeleteOverride(ctx, tenant, base)
}

func (v *view) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	return func(yield func(lease.ListedOverride, error) bool) {
		if err := v.s.enter(ctx, v.id, OpOverride, nil); err != nil {
			yield(lease.ListedOverride{}, err)
			return
		}
		v.inner.ListOverrides(ctx)(yield)
	}
}

func (v *view) QuotaVersion(ctx context.Context) (int64, error) {
	if err := v.s.enter(ctx, v.id, OpVersion, nil); err != nil {
		return 0, err
	}
	return v.inner.QuotaVersion(ctx)
}

// ProbeWrite is the backend's write that changes nothing
// (syncer.WriteProber), nil when it has none: the hook may fail it as
// Redis fails a write (READONLY).
func (v *view) ProbeWrite(ctx context.Context) error {
	if err := v.s.enter(ctx, v.id, OpProbe, nil); err != nil {
		return err
	}
	if p, ok := v.inner.(prober); ok {
		return p.ProbeWrite(ctx)
	}
	return nil
}

// roster is what a view that keeps the fleet's roster offers.
type roster interface {
	lease.InstanceCounter
	lease.RosterLeaver
}

// nodeLocator is a Redis Cluster's view: syncer.NodeLocator, written
// again because the syncer's tests may use this package, which then
// cannot import syncer.
type nodeLocator interface {
	NodeOf(ctx context.Context, tenant string) (string, bool)
}

func (v *view) CountInstances(ctx context.Context) (int, error) {
	if err := v.s.enter(ctx, v.id, OpRoster, nil); err != nil {
		return 0, err
	}
	return v.roster.CountInstances(ctx)
}

func (v *view) LeaveRoster(ctx context.Context) error {
	if err := v.s.enter(ctx, v.id, OpRoster, nil); err != nil {
		return err
	}
	return v.roster.LeaveRoster(ctx)
}

func (v *view) NodeOf(ctx context.Context, tenant string) (string, bool) {
	return v.nodeOf(ctx, tenant)
}
