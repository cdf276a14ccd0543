package middleware_test

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestWindowOfPer: the w of a quota made by leasequota.Per(n, period) is
// the period, in seconds. Rate n/period.Seconds() is rounded to a
// float64, and Burst/Rate came out a few ulps above the period
// (11/(11/60.0) = 60.00000000000001): ceil made it 61 for Per(11,
// time.Minute), 86401 for Per(11, 24*time.Hour).
func TestWindowOfPer(t *testing.T) {
	for _, c := range []struct {
		n      int64
		period time.Duration
		want   int64
	}{
		{11, time.Minute, 60},
		{17, 7 * time.Second, 7},
		{65, time.Hour, 3600},
		{11, 24 * time.Hour, 86400},
		{1000, 24 * time.Hour, 86400},
		{10, time.Second, 1},
	} {
		if got := middleware.Window(leasequota.Per(c.n, c.period)); got != c.want {
			t.Errorf("Window(Per(%d, %v)) = %d, want %d", c.n, c.period, got, c.want)
		}
	}
	// A quotient truly above a whole number still rounds up.
	for _, c := range []struct {
		q    leasequota.Quota
		want int64
	}{
		{leasequota.Quota{Rate: 2, Burst: 5}, 3},
		{leasequota.Quota{Rate: 1, Burst: 60}, 60},
		{leasequota.Quota{Rate: 60.0 / 61, Burst: 60}, 61},
		{leasequota.Quota{Rate: 1000.0 / 86401, Burst: 1000}, 86401},
		{leasequota.Quota{Rate: 1 - 1e-9, Burst: 1 << 20}, 1<<20 + 1},
	} {
		if got := middleware.Window(c.q); got != c.want {
			t.Errorf("Window(%+v) = %d, want %d", c.q, got, c.want)
		}
	}
}
