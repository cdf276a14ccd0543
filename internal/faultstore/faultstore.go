// Package faultstore wraps the global buckets of Limiters (a Backend, such
// as *memstore.Store) with the faults of a network: an outage, a delay per
// call, and a hook that may fail or hold any call (Delay and Pause make
// the common ones). It counts the calls by kind. Tests of the root package and the deterministic simulation use it
// where Redis itself is not the subject.
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
)

// Backend is what a Store wraps: it hands out one view per instance.
type Backend interface {
	Instance(id string, window time.Duration) (lease.Store, error)
}

// A Hook runs before every call of instance id, of op over n requests;
// a non-nil error fails the call as a whole, without reaching the store.
// It may block (a delay) until ctx is done.
type Hook func(ctx context.Context, id string, op Op, n int) error

// Store wraps a Backend with faults. Its zero value is not usable: call
// New. It is safe for concurrent use.
type Store struct {
	inner Backend

	down atomic.Pointer[error] // nil: up
	mu   sync.Mutex            // guards hook and calls
	hook Hook
	// calls counts the calls by kind and whether they reached the store.
	calls map[Op]*[2]int64
}

// New wraps b.
func New(b Backend) *Store {
	return &Store{inner: b, calls: map[Op]*[2]int64{}}
}

// SetDown makes every call fail with err (ErrDown when err is nil) until
// SetUp.
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

// Delay returns a Hook that holds every call for d, as a slow network
// does, then lets it through. A call whose ctx is done first fails with
// ctx.Err() without reaching the store, as a client call that timed out.
func Delay(d time.Duration) Hook {
	return func(ctx context.Context, _ string, _ Op, _ int) error {
		return hold(ctx, d)
	}
}

// Pause returns a Hook that holds every call until the time until, then
// lets it through: Redis's CLIENT PAUSE, which holds the commands of every
// client until the pause ends. A call made after until is not held. A call
// whose ctx is done first fails with ctx.Err() without reaching the store.
func Pause(until time.Time) Hook {
	return func(ctx context.Context, _ string, _ Op, _ int) error {
		return hold(ctx, time.Until(until))
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
// faults of s.
func (s *Store) Instance(id string, window time.Duration) (lease.Store, error) {
	v, err := s.inner.Instance(id, window)
	if err != nil {
		return nil, err
	}
	return &view{s: s, id: id, inner: v}, nil
}

// enter runs the faults of one call and reports the error that fails it.
func (s *Store) enter(ctx context.Context, id string, op Op, n int) error {
	s.mu.Lock()
	c := s.calls[op]
	if c == nil {
		c = new([2]int64)
		s.calls[op] = c
	}
	c[0]++
	h := s.hook
	s.mu.Unlock()
	if h != nil {
		if err := h(ctx, id, op, n); err != nil {
			return err
		}
	}
	if p := s.down.Load(); p != nil {
		return fmt.Errorf("faultstore: %s: %w", op, *p)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	c[1]++
	s.mu.Unlock()
	return nil
}

type view struct {
	s     *Store
	id    string
	inner lease.Store
}

func (v *view) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if err := v.s.enter(ctx, v.id, OpAcquire, len(reqs)); err != nil {
		return nil, err
	}
	return v.inner.AcquireMany(ctx, reqs, results)
}

func (v *view) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	if err := v.s.enter(ctx, v.id, OpRelease, len(reqs)); err != nil {
		out := make([]lease.ReleaseResult, len(reqs))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return v.inner.ReleaseMany(ctx, reqs)
}

func (v *view) GetOverride(ctx context.Context, tenant string) (*lease.Override, error) {
	if err := v.s.enter(ctx, v.id, OpOverride, 1); err != nil {
		return nil, err
	}
	return v.inner.GetOverride(ctx, tenant)
}

func (v *view) SetOverride(ctx context.Context, tenant string, base lease.Limits, o lease.Override) (float64, error) {
	if err := v.s.enter(ctx, v.id, OpOverride, 1); err != nil {
		return 0, err
	}
	return v.inner.SetOverride(ctx, tenant, base, o)
}

func (v *view) DeleteOverride(ctx context.Context, tenant string, base lease.Limits) (float64, error) {
	if err := v.s.enter(ctx, v.id, OpOverride, 1); err != nil {
		return 0, err
	}
	return v.inner.DeleteOverride(ctx, tenant, base)
}

func (v *view) ListOverrides(ctx context.Context) iter.Seq2[lease.ListedOverride, error] {
	return func(yield func(lease.ListedOverride, error) bool) {
		if err := v.s.enter(ctx, v.id, OpOverride, 1); err != nil {
			yield(lease.ListedOverride{}, err)
			return
		}
		v.inner.ListOverrides(ctx)(yield)
	}
}

func (v *view) QuotaVersion(ctx context.Context) (int64, error) {
	if err := v.s.enter(ctx, v.id, OpVersion, 1); err != nil {
		return 0, err
	}
	return v.inner.QuotaVersion(ctx)
}
