package quota

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testDefaults = Defaults{LeaseTTL: time.Second, FailureMode: FailLocal, Interval: 100 * time.Millisecond}

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     Quota
		want   Quota
		stored bool // Check refuses in: only a stored override looks like it
	}{
		{"defaults", Quota{Rate: 10, Burst: 100},
			Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: time.Second, FailureMode: FailLocal}, false},
		{"burst 1", Quota{Rate: 10, Burst: 1},
			Quota{Rate: 10, Burst: 1, MinLease: 1, MaxLease: 1, LeaseTTL: time.Second, FailureMode: FailLocal}, false},
		{"MaxLease at least MinLease", Quota{Rate: 10, Burst: 100, MinLease: 80},
			Quota{Rate: 10, Burst: 100, MinLease: 80, MaxLease: 80, LeaseTTL: time.Second, FailureMode: FailLocal}, false},
		{"set fields kept", Quota{Rate: 10, Burst: 100, MinLease: 5, MaxLease: 20, LeaseTTL: time.Minute, FailureMode: FailOpen},
			Quota{Rate: 10, Burst: 100, MinLease: 5, MaxLease: 20, LeaseTTL: time.Minute, FailureMode: FailOpen}, false},
		{"short LeaseTTL raised", Quota{Rate: 10, Burst: 100, LeaseTTL: time.Millisecond},
			Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: 200 * time.Millisecond, FailureMode: FailLocal}, true},
		{"long LeaseTTL cut", Quota{Rate: 10, Burst: 100, LeaseTTL: 48 * time.Hour},
			Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: MaxLeaseTTL, FailureMode: FailLocal}, true},
		{"leases above Burst cut", Quota{Rate: 10, Burst: 100, MinLease: 500, MaxLease: 300},
			Quota{Rate: 10, Burst: 100, MinLease: 100, MaxLease: 100, LeaseTTL: time.Second, FailureMode: FailLocal}, true},
		{"MaxLease below MinLease raised", Quota{Rate: 10, Burst: 100, MinLease: 40, MaxLease: 10},
			Quota{Rate: 10, Burst: 100, MinLease: 40, MaxLease: 40, LeaseTTL: time.Second, FailureMode: FailLocal}, true},
		{"unknown mode", Quota{Rate: 10, Burst: 100, FailureMode: 9},
			Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: time.Second, FailureMode: FailLocal}, true},
	} {
		if err := testDefaults.Check(c.in); (err != nil) != c.stored {
			t.Errorf("%s: Check(%+v) = %v", c.name, c.in, err)
		}
		got := testDefaults.Resolve(c.in)
		if got != c.want {
			t.Errorf("%s: Resolve(%+v) = %+v, want %+v", c.name, c.in, got, c.want)
		}
		if err := testDefaults.Check(got); err != nil {
			t.Errorf("%s: Check(Resolve(%+v)) = %v: a resolved quota must be usable", c.name, c.in, err)
		}
		if again := testDefaults.Resolve(got); again != got {
			t.Errorf("%s: Resolve is not idempotent: %+v, then %+v", c.name, got, again)
		}
	}
}

func TestCheckLeaseTTL(t *testing.T) {
	for _, c := range []struct {
		ttl time.Duration
		ok  bool
	}{{0, true}, {199 * time.Millisecond, false}, {200 * time.Millisecond, true}, {time.Hour, true}} {
		err := testDefaults.Check(Quota{Rate: 1, Burst: 1, LeaseTTL: c.ttl})
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("LeaseTTL %v: Check = %v, want ok=%v", c.ttl, err, c.ok)
		}
	}
}

func TestValidateMessages(t *testing.T) {
	for _, c := range []struct {
		q    Quota
		want string
	}{
		{Quota{Rate: 0, Burst: 1}, "leasequota: invalid quota: Rate is 0, want a finite number in (0, 1e+12]"},
		{Quota{Rate: 1, Burst: 0}, "leasequota: invalid quota: Burst is 0, want 1..1099511627776"},
		{Quota{Rate: 1, Burst: 5, MaxLease: 6}, "leasequota: invalid quota: MaxLease 6 is above Burst 5"},
	} {
		err := c.q.Validate()
		if err == nil || err.Error() != c.want || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: Validate() = %v, want %q", c.q, err, c.want)
		}
		if strings.Count(err.Error(), ": invalid") != 1 || strings.Contains(err.Error(), "lease:") {
			t.Errorf("%+v: %q: want one package prefix", c.q, err)
		}
	}
}

func TestOverrideRoundTrip(t *testing.T) {
	q := Quota{Rate: 2.5, Burst: 10, MinLease: 2, MaxLease: 5, LeaseTTL: 3 * time.Second, FailureMode: FailClosed}
	if got := FromOverride(ToOverride(q)); got != q {
		t.Errorf("FromOverride(ToOverride(%+v)) = %+v", q, got)
	}
	if b := Bucket(q); b.Rate != q.Rate || b.Burst != q.Burst {
		t.Errorf("Bucket(%+v) = %+v", q, b)
	}
}
