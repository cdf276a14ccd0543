package lease

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// flakyScan is a Redis client whose next SCAN fails when fail is set.
type flakyScan struct {
	*redis.Client
	fail bool
}

func (f *flakyScan) Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd {
	if f.fail {
		f.fail = false
		cmd := redis.NewScanCmd(ctx, nil)
		cmd.SetErr(errors.New("injected"))
		return cmd
	}
	return f.Client.Scan(ctx, cursor, match, count)
}

// TestSamplerPassesAfterAnError, on redis-server: a failed SCAN does not
// take BucketSampler.Passes back. The per-node counts start over when the
// nodes are listed again, and Passes went from 2 to 0, where its doc
// counts the passes completed.
func TestSamplerPassesAfterAnError(t *testing.T) {
	ctx := context.Background()
	f := &flakyScan{Client: redisserver.Client(t)}
	c, err := NewClient(f, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "a", Limits{Rate: 1, Burst: 10}, 1); err != nil {
		t.Fatal(err)
	}
	s := c.NewBucketSampler()
	for s.Passes() < 2 {
		if _, err := s.Next(ctx, 100000); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Passes()
	f.fail = true
	if _, err := s.Next(ctx, 100000); err == nil {
		t.Fatal("the injected SCAN error was not reported")
	}
	for range 3 {
		if _, err := s.Next(ctx, 100000); err != nil {
			t.Fatal(err)
		}
		if s.Passes() < before {
			t.Fatalf("Passes went from %d to %d after an error", before, s.Passes())
		}
	}
	if s.Passes() <= before {
		t.Errorf("Passes %d after three more passes, want more than %d", s.Passes(), before)
	}
}
