package memstore_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/internal/rateshare"
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

// TestSharesAreTheModel runs memstore's shares beside internal/rateshare's
// Bucket, the model whose bound and token identity are property tests,
// on one tenant with fixed terms: every grant, renewal and end of a share
// that memstore makes is made on the model at the same time, and the
// tokens memstore grants are taken from it; the share granted, the sums
// in force (and booked) and the level must agree after every call, to
// within rounding (the model sums its shares anew once none is left).
// And the bound itself, on memstore's replies alone: everything issued
// from the first call, every token granted plus each share's rate over
// the time it was held (from its From until its Until, or until the call
// that replaced or ended it), is at most Burst + Rate*T.
func TestSharesAreTheModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		c := newClock()
		s := memstore.New(memstore.WithClock(c.Now))
		lim := lease.Limits{
			Rate:  rapid.Float64Range(10, 1000).Draw(t, "rate"),
			Burst: rapid.Int64Range(1, 500).Draw(t, "burst"),
		}
		period := time.Duration(rapid.Int64Range(1, 5_000).Draw(t, "period ms")) * time.Millisecond
		terms := lease.ShareTerms{
			Period:   period,
			Phase:    time.Duration(rapid.Int64Range(0, period.Microseconds()-1).Draw(t, "phase µs")) * time.Microsecond,
			Hold:     time.Duration(rapid.Int64Range(100, 3_000).Draw(t, "hold ms")) * time.Millisecond,
			Headroom: rapid.Float64Range(0, 0.5).Draw(t, "headroom"),
		}
		p := rateshare.Params{Rate: lim.Rate, Burst: float64(lim.Burst), Period: terms.Period, Phase: terms.Phase, Headroom: terms.Headroom, Hold: terms.Hold}
		var model *rateshare.Bucket // made full at the first call, as a missing key is
		type holder struct {
			id    string
			v     lease.Store
			share lease.RateShare
		}
		hs := make([]*holder, rapid.IntRange(2, 4).Draw(t, "instances"))
		for i := range hs {
			id := strconv.Itoa(i)
			v, err := s.Instance(id, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			hs[i] = &holder{id: id, v: v}
		}
		near := func(a, b, scale float64) bool { return math.Abs(a-b) <= 1e-9*(1+scale) }
		var first, last int64 // the bucket's times of the first and the last call, µs
		var issued float64    // tokens granted, and the accruals of shares no longer held
		accrued := func(r lease.RateShare, end int64) float64 {
			return r.Rate * float64(max(0, min(end, r.Until.UnixMicro())-r.From.UnixMicro())) / 1e6
		}
		diverged := false // at a share on the edge of Hold: the two go apart from then on
		t.Repeat(map[string]func(*rapid.T){
			"advance": func(t *rapid.T) {
				// Steps of parts of a period, so that shares are asked in
				// both halves of epochs and live across their ends.
				d := rapid.SampledFrom([]time.Duration{0, time.Microsecond, period / 4, period / 3, period / 2, period, 3 * period}).Draw(t, "step")
				c.Add(d)
			},
			"acquire": func(t *rapid.T) {
				if diverged {
					return
				}
				h := rapid.SampledFrom(hs).Draw(t, "instance")
				req := lease.Request{Tenant: "t", Limits: lim, ShareTerms: terms,
					Want:   rapid.Int64Range(0, lim.Burst).Draw(t, "want"),
					Demand: rapid.Float64Range(lim.Rate/4, 2*lim.Rate).Draw(t, "demand"),
					Share:  rapid.SampledFrom([]lease.ShareOp{lease.ShareKeep, lease.ShareAsk, lease.ShareAsk, lease.ShareEnd}).Draw(t, "op"),
				}
				if req.Share == lease.ShareEnd {
					req.ShareFrom = c.Now()
					if h.share.Held() && rapid.Bool().Draw(t, "its own From") {
						req.ShareFrom = h.share.From
					}
				}
				res, err := h.v.AcquireMany(ctx, []lease.Request{req}, nil)
				if err != nil || res[0].Err != nil {
					t.Fatalf("acquire %+v: %v, %v", req, err, res[0].Err)
				}
				g := res[0].Grant
				at := g.ServerTime.UnixMicro()
				if model == nil {
					model = rateshare.NewBucket(p, at)
				}
				level := model.Level(p, at)
				var want rateshare.Share
				switch req.Share {
				case lease.ShareAsk:
					want = model.GrantShare(p, at, h.id, g.Share)
				case lease.ShareEnd:
					model.ReleaseShare(p, at, h.id, rateshare.Share{Rate: h.share.Rate, From: req.ShareFrom.UnixMicro(), Until: h.share.Until.UnixMicro()})
				}
				// Granted or not may differ only where the share would hold
				// one token over Hold to within rounding.
				edge := math.Abs(max(g.RateShare.Rate, want.Rate)*terms.Hold.Seconds()-1) < 1e-9
				if req.Share == lease.ShareAsk && (g.RateShare.Held() != (want.Rate > 0) && !edge ||
					g.RateShare.Held() && want.Rate > 0 && (!near(g.RateShare.Rate, want.Rate, lim.Rate) ||
						g.RateShare.From.UnixMicro() != want.From || g.RateShare.Until.UnixMicro() != want.Until)) {
					t.Fatalf("granted %+v, the model %+v", g.RateShare, want)
				}
				if g.RateShare.Held() != (want.Rate > 0) && req.Share == lease.ShareAsk {
					diverged = true
					return
				}
				model.Tokens -= float64(g.Granted)
				if first == 0 {
					first = at
				}
				last = at
				issued += float64(g.Granted)
				if h.share.Held() && g.RateShare != h.share {
					issued += accrued(h.share, at)
				}
				h.share = g.RateShare
				sh := s.Tenant("t").Bucket.Shares
				if !near(g.Tokens+float64(g.Granted), level, float64(lim.Burst)) || !near(sh.Committed, model.Committed, lim.Rate) || !near(sh.Booked, model.Booked, lim.Rate) {
					t.Fatalf("at %d: level %v, shares %+v; the model's %v, %v and %v", at, g.Tokens+float64(g.Granted), sh, level, model.Committed, model.Booked)
				}
			},
			"": func(t *rapid.T) {
				total := issued
				for _, h := range hs {
					if h.share.Held() {
						total += accrued(h.share, last)
					}
				}
				bound := float64(lim.Burst) + lim.Rate*float64(last-first)/1e6
				if total > bound+1e-6*(1+bound) {
					t.Fatalf("issued %v (tokens and shares) by %d µs, above Burst + Rate*T = %v", total, last-first, bound)
				}
			},
		})
	})
}
