package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// A store driven by a fake clock: two instances share a tenant's bucket of
// 10 tokens refilled at 5 per second, deterministically.
func Example() {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	a, _ := store.Instance("instance-a", 2*time.Second)
	b, _ := store.Instance("instance-b", 2*time.Second)
	ctx := context.Background()
	lim := lease.Limits{Rate: 5, Burst: 10}

	var st lease.Store = a // what a syncer is given
	res, _ := st.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lim, Want: 8}}, nil)
	ga := res[0].Grant
	fmt.Printf("a: %d granted, %v left, %d instance\n", ga.Granted, ga.Tokens, ga.Instances)

	res, _ = b.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lim, Want: 8}}, nil)
	fmt.Printf("b: %d granted (partial), %d instances\n", res[0].Grant.Granted, res[0].Grant.Instances)

	// A second later a gives 3 unspent tokens back, naming its grant: the
	// bucket has held at most 5 since, so all 3 fit under the cap.
	now = now.Add(time.Second)
	rel := a.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "acme", Limits: lim, Amount: 3, Age: time.Second, Grant: ga.ID()}})
	fmt.Printf("a returns 3: %v credited, %v in the bucket\n", rel[0].Return.Credited, rel[0].Return.Tokens)
	// Output:
	// a: 8 granted, 2 left, 1 instance
	// b: 2 granted (partial), 2 instances
	// a returns 3: 3 credited, 8 in the bucket
}

// Rate shares (lease.Request.Share): two instances of a tenant of 100
// tokens a second each ask for a share of the rate for the current epoch
// of 10 s, keeping 10 % of the rate for bursts. The first gets its fair
// share, the second what is left of the 90; the bucket refills at the
// rest. An end names the share by its From.
func Example_rateShares() {
	now := time.Date(2027, 1, 1, 0, 0, 1, 0, time.UTC) // 1 s into an epoch of 10 s
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	a, _ := store.Instance("instance-a", 10*time.Second)
	b, _ := store.Instance("instance-b", 10*time.Second)
	ctx := context.Background()
	lim := lease.Limits{Rate: 100, Burst: 100}
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: 500 * time.Millisecond, Headroom: 0.1}
	ask := func(v lease.Store, demand float64) lease.Grant {
		res, _ := v.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lim, Demand: demand, Share: lease.ShareAsk, ShareTerms: terms}}, nil)
		return res[0].Grant
	}
	// Both report their demand first (a share asked for on a first call
	// would be sized before the other instances are known).
	for _, v := range []lease.Store{a, b} {
		v.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lim, Demand: 60}}, nil)
	}
	ga := ask(a, 60)
	fmt.Printf("a: %v/s until %v\n", ga.RateShare.Rate, ga.RateShare.Until.Sub(now))
	gb := ask(b, 60)
	fmt.Printf("b: %v/s until %v\n", gb.RateShare.Rate, gb.RateShare.Until.Sub(now))
	fmt.Printf("in force: %v/s\n", store.Tenant("acme").Bucket.Shares.Committed)

	now = now.Add(time.Second)
	res, _ := a.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lim, Demand: 60, Share: lease.ShareEnd, ShareFrom: ga.RateShare.From}}, nil)
	fmt.Printf("a ends its share: holds %v/s, %v/s in force\n", res[0].Grant.RateShare.Rate, store.Tenant("acme").Bucket.Shares.Committed)
	// Output:
	// a: 50/s until 9s
	// b: 40/s until 9s
	// in force: 90/s
	// a ends its share: holds 0/s, 40/s in force
}
