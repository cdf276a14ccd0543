package leasequota_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestWaitErrorsNameTheWait: the errors of WaitN and WaitAll name the wait
// that failed, its tenant and n, and not a function the caller did not
// call: WaitAll's said "WaitN(tenant, n)".
func TestWaitErrorsNameTheWait(t *testing.T) {
	l := newLimiter(t, memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 10}))
	ctx := context.Background()
	expired, cancel := context.WithTimeout(ctx, -time.Second)
	defer cancel()
	for _, c := range []struct {
		call string
		err  error
		want error
	}{
		{"WaitAll(11, a, b)", second(l.WaitAll(ctx, 11, "a", "b")), leasequota.ErrExceedsBurst},
		{"WaitAll(0, a, b)", second(l.WaitAll(ctx, 0, "a", "b")), leasequota.ErrInvalidN},
		{"WaitN(a, 11)", second(l.WaitN(ctx, "a", 11)), leasequota.ErrExceedsBurst},
		{"WaitN(a, 5), ctx done", second(l.WaitN(expired, "a", 5)), context.DeadlineExceeded},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.call, c.err, c.want)
			continue
		}
		msg := c.err.Error()
		if strings.HasPrefix(c.call, "WaitAll") && strings.Contains(msg, "WaitN") {
			t.Errorf("%s: %q names WaitN", c.call, msg)
		}
		if !strings.Contains(msg, `of tenant "a"`) {
			t.Errorf("%s: %q does not name the tenant", c.call, msg)
		}
		if strings.Count(msg, "leasequota:") != 1 {
			t.Errorf("%s: %q, want one package prefix", c.call, msg)
		}
	}
}

func second(_ leasequota.Decision, err error) error { return err }
