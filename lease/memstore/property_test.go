package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// grantRec is one grant of the property test and what became of its
// tokens.
type grantRec struct {
	at       int64 // the bucket's time of the grant, µs
	granted  int64
	left     int64   // tokens not yet returned
	credited float64 // credited back for them so far
	id       lease.GrantID
}

// TestNetGrantsBoundedProperty: whatever instances acquire and return,
// however time passes (standing still included), the bucket behaves as
// one that never granted the tokens it credited back: for every run of
// consecutive grants i..j, what they granted less what was credited for
// them is at most Burst + Rate * (t_j - t_i), in the bucket's time. With
// i the first grant that is the invariant of the package doc, granted -
// credited <= Burst + Rate*T. It also checks each reply's ranges and that
// a bucket's times rise.
func TestNetGrantsBoundedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		c := newClock()
		s := memstore.New(memstore.WithClock(c.Now))
		lim := lease.Limits{
			Rate:  rapid.Float64Range(0.01, 1000).Draw(t, "rate"),
			Burst: rapid.Int64Range(1, 500).Draw(t, "burst"),
		}
		views := make([]lease.Store, rapid.IntRange(1, 3).Draw(t, "instances"))
		for i := range views {
			window := time.Duration(rapid.Int64Range(1, 2000).Draw(t, "window ms")) * time.Millisecond
			v, err := s.Instance(strconv.Itoa(i), window)
			if err != nil {
				t.Fatal(err)
			}
			views[i] = v
		}
		var (
			grants  []*grantRec
			last    int64 // the bucket's time of the last call, µs
			lastAcq int64 // of the last acquire
		)
		// Calls that write the bucket have distinct, rising times. A
		// release that changes nothing (into a missing bucket) reports
		// the time without storing it, so the next call may repeat it.
		step := func(at time.Time, acquire bool) {
			us := at.UnixMicro()
			if us < last || acquire && us <= lastAcq {
				t.Fatalf("a call at %d, before the previous one at %d (acquire at %d)", us, last, lastAcq)
			}
			last = us
			if acquire {
				lastAcq = us
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"advance": func(t *rapid.T) {
				// Often not at all, so that calls share a clock reading.
				d := rapid.SampledFrom([]int64{0, 0, 1, 999, 100_000, 1_000_000, 3_000_000}).Draw(t, "µs")
				c.Add(time.Duration(d) * time.Microsecond)
			},
			"acquire": func(t *rapid.T) {
				v := rapid.SampledFrom(views).Draw(t, "view")
				want := rapid.Int64Range(0, 2*lim.Burst).Draw(t, "want")
				demand := rapid.Float64Range(0, 3*lim.Rate).Draw(t, "demand")
				res, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: want, Demand: demand}}, nil)
				if err != nil || res[0].Err != nil {
					t.Fatalf("acquire: %v, %v", err, res[0].Err)
				}
				g := res[0].Grant
				if g.Granted < 0 || g.Granted > want || g.Tokens < 0 || g.Tokens > float64(lim.Burst) {
					t.Fatalf("acquire %d: %+v", want, g)
				}
				step(g.ServerTime, true)
				if g.Granted > 0 {
					grants = append(grants, &grantRec{at: g.ServerTime.UnixMicro(), granted: g.Granted, left: g.Granted, id: g.ID()})
				}
			},
			"release": func(t *rapid.T) {
				var open []*grantRec
				for _, g := range grants {
					if g.left > 0 {
						open = append(open, g)
					}
				}
				if len(open) == 0 {
					return // nothing to return yet: this step is a no-op
				}
				g := rapid.SampledFrom(open).Draw(t, "grant")
				amount := rapid.Int64Range(1, g.left).Draw(t, "amount")
				req := lease.ReleaseRequest{Tenant: "t", Limits: lim, Amount: amount}
				if g.id != 0 && rapid.Bool().Draw(t, "named") {
					// The ID tells the grant's time; the age only has to
					// be below 2^32 µs.
					req.Grant = g.id
					req.Age = time.Duration(rapid.Int64Range(0, 1_000_000).Draw(t, "age µs")) * time.Microsecond
				} else {
					// An upper bound of the age at the bucket's time of
					// the release, which is at most a microsecond after
					// the last call (or the clock's).
					now := max(c.Now().UnixMicro(), last+1)
					extra := rapid.Int64Range(0, 2_000_000).Draw(t, "extra age µs")
					req.Age = time.Duration(now-g.at+extra) * time.Microsecond
				}
				res := rapid.SampledFrom(views).Draw(t, "view").ReleaseMany(ctx, []lease.ReleaseRequest{req})
				r := res[0].Return
				if res[0].Err != nil || r.Credited < 0 || r.Credited > float64(amount) || r.Tokens < 0 || r.Tokens > float64(lim.Burst) {
					t.Fatalf("release %+v: %+v, %v", req, r, res[0].Err)
				}
				step(r.ServerTime, false)
				g.left -= amount
				g.credited += r.Credited
			},
			"": func(t *rapid.T) {
				for j := range grants {
					net := 0.0
					for i := j; i >= 0; i-- {
						net += float64(grants[i].granted) - grants[i].credited
						span := float64(grants[j].at-grants[i].at) / 1e6
						bound := float64(lim.Burst) + lim.Rate*span
						if net > bound+1e-6*(1+bound) {
							t.Fatalf("grants %d..%d: %v net of credits in %vs, above Burst + Rate*T = %v", i, j, net, span, bound)
						}
					}
				}
			},
		})
	})
}
