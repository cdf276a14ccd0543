package faultstore_test

import (
	"context"
	"errors"
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
