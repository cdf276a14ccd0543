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
