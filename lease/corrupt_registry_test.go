package lease

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/redisserver"
)

// TestCorruptRegistryIsRepaired: registry contents that no call writes (a
// credit, demand or time that is not a finite number, a negative credit,
// a summary whose counts are not finite) are never used as they are: an
// entry that does not read is taken for none (its instance's own is
// written again, another's is dropped) and a summary that does not read
// is recomputed. Used as they were, a credit of nan turned the fair-share
// cap off for its instance and was written back as nan on every call, a
// negative credit made a negative grant that put tokens into the bucket,
// an entry at time inf never went stale (an instance counted for ever),
// and a summary of inf instances replied -2^63 instances.
func TestCorruptRegistryIsRepaired(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	// A rate so low that nothing refills during the test.
	lim := Limits{Rate: 1e-6, Burst: 1000}
	client := func(id string) *Client {
		c, err := NewClient(rdb, prefix, WithInstance(id, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, c, d := client("a"), client("b"), client("c"), client("d")
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	nowUS := func() string {
		t.Helper()
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(now.UnixMicro(), 10)
	}
	finiteEntries := func(tenant string) map[string]string {
		t.Helper()
		m, err := rdb.HGetAll(ctx, InstancesKey(plain.Key(tenant))).Result()
		if err != nil {
			t.Fatal(err)
		}
		for id, e := range m {
			for _, f := range strings.Split(e, ":")[:3] {
				if x, err := strconv.ParseFloat(f, 64); err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
					t.Errorf("%q: entry %q = %q holds %q", tenant, id, e, f)
				}
			}
		}
		return m
	}
	// scarce drains tenant to 400 of 1000 and registers b, c and d with
	// demands far above the rate: a's share is a quarter, its credit (new)
	// a quarter of the burst, 250.
	scarce := func(tenant string) {
		t.Helper()
		if g, err := plain.Acquire(ctx, tenant, lim, 600); err != nil || g.Granted != 600 {
			t.Fatalf("drain: %+v, %v", g, err)
		}
		for _, x := range []*Client{b, c, d} {
			if _, err := acquireRequest(ctx, x, Request{Tenant: tenant, Limits: lim, Want: 0, Demand: 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, credit := range []string{"nan", "-nan", "inf", "-inf", "-100"} {
		tenant := "credit" + credit
		scarce(tenant)
		ikey := InstancesKey(plain.Key(tenant))
		if err := rdb.HSet(ctx, ikey, "a", nowUS()+":1000:"+credit+":").Err(); err != nil {
			t.Fatal(err)
		}
		g, err := acquireRequest(ctx, a, Request{Tenant: tenant, Limits: lim, Want: 400, Demand: 1000})
		if err != nil || g.Granted != 250 || math.Floor(g.Tokens) != 150 || g.Instances != 4 {
			t.Errorf("a's entry with credit %s: %+v, %v; want 250 granted (a new instance's credit), 150 left, 4 instances", credit, g, err)
		}
		finiteEntries(tenant)
	}

	for _, seen := range []string{"inf", "nan", "-inf", "1e999"} {
		tenant := "seen" + seen
		if _, err := acquireRequest(ctx, a, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10}); err != nil {
			t.Fatal(err)
		}
		ikey := InstancesKey(plain.Key(tenant))
		if err := rdb.HSet(ctx, ikey, "ghost", seen+":10:5:").Err(); err != nil {
			t.Fatal(err)
		}
		// A new instance whose demand, with the others', passes the rate
		// recomputes the summary from every entry (it would join one whose
		// demands stay met).
		g, err := acquireRequest(ctx, b, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10})
		if err != nil || g.Instances != 2 {
			t.Errorf("an entry at time %s: %+v, %v; want 2 instances (a and b)", seen, g, err)
		}
		if m := finiteEntries(tenant); m["ghost"] != "" {
			t.Errorf("an entry at time %s was kept: %v", seen, m)
		}
	}

	for _, rg := range []string{":inf:0:-1", ":nan:0:-1", ":0:0:-1", ":1.5:0:-1", ":1:inf:-1", ":1:-1:-1", ":1:0:inf", ":1:0:-inf", ":1:0:-2"} {
		tenant := "summary" + rg
		if _, err := acquireRequest(ctx, a, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10}); err != nil {
			t.Fatal(err)
		}
		key := plain.Key(tenant)
		if err := rdb.HSet(ctx, key, "rg", nowUS()+rg).Err(); err != nil {
			t.Fatal(err)
		}
		g, err := acquireRequest(ctx, a, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10})
		if err != nil || g.Instances != 1 || g.Share != lim.Rate {
			t.Errorf("a summary %q: %+v, %v; want 1 instance, a share of the rate", rg, g, err)
		}
		v, err := rdb.HGet(ctx, key, "rg").Result()
		if err != nil || strings.Contains(v, "inf") || strings.Contains(v, "nan") || strings.HasSuffix(v, rg) {
			t.Errorf("a summary %q was left as %q, %v; want it recomputed", rg, v, err)
		}
	}
}

// TestShareNoRecordHoldsIsDropped: an entry older than the window is
// kept only while the share it holds is in force (SHARES), and no share is
// in force past the end of the bucket's record of shares (the epoch after
// the record's), or with no record at all. An entry whose share ran until
// inf, nan-free but past every record (2^53 µs, 1e300), was kept for as
// long as the hash lived: never dropped as stale, read as its instance's
// own however long after, so that a registry no call writes was not
// repaired as TestCorruptRegistryIsRepaired's are.
func TestShareNoRecordHoldsIsDropped(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	lim := Limits{Rate: 100, Burst: 1000}
	client := func(id string) *Client {
		t.Helper()
		c, err := NewClient(rdb, prefix, WithInstance(id, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, holder := client("a"), client("b"), client("holder")
	terms := ShareTerms{Period: time.Hour, Hold: time.Second}
	for _, withRecord := range []bool{false, true} {
		for _, until := range []string{"inf", "1e300", "9007199254740992"} {
			tenant := fmt.Sprintf("until%s-record%v", until, withRecord)
			ikey := InstancesKey(Key(prefix, tenant))
			acquireOne(t, a, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10})
			if withRecord {
				g := acquireOne(t, holder, Request{Tenant: tenant, Limits: lim, Demand: 10, Share: ShareAsk, ShareTerms: terms})
				if !g.RateShare.Held() {
					t.Fatalf("%s: holder got no share: %+v", tenant, g)
				}
			}
			// An entry an hour old (60 windows), its share from then.
			old := strconv.FormatInt(redisNow(t, rdb)-int64(time.Hour/time.Microsecond), 10)
			if err := rdb.HSet(ctx, ikey, "ghost", old+":10:5:5/"+old+"/"+until).Err(); err != nil {
				t.Fatal(err)
			}
			// A new instance whose demand, with the others', passes the
			// rate recomputes the summary from every entry (it would join
			// one whose demands stay met).
			acquireOne(t, b, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 95})
			m, err := rdb.HGetAll(ctx, ikey).Result()
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := m["ghost"]; ok {
				t.Errorf("%s: an hour-old entry whose share runs until %s was kept: %q", tenant, until, e)
			}
			if withRecord {
				if _, ok := m["holder"]; !ok {
					t.Errorf("%s: the holder's entry was dropped: %v", tenant, m)
				}
			}
		}
	}

	// An active entry's share that ends past the record is not the
	// instance's: taken for its own, its next ask took its rate out of a
	// record that never held it, so the record committed less than the
	// shares in force hold.
	const tenant = "fresh"
	ikey := InstancesKey(Key(prefix, tenant))
	acquireOne(t, a, Request{Tenant: tenant, Limits: lim, Want: 1, Demand: 10})
	gh := acquireOne(t, holder, Request{Tenant: tenant, Limits: lim, Demand: 10, Share: ShareAsk, ShareTerms: terms})
	if !gh.RateShare.Held() {
		t.Fatalf("holder got no share: %+v", gh)
	}
	now := strconv.FormatInt(redisNow(t, rdb), 10)
	if err := rdb.HSet(ctx, ikey, "ghost", now+":10:5:5/"+now+"/inf").Err(); err != nil {
		t.Fatal(err)
	}
	gg := acquireOne(t, client("ghost"), Request{Tenant: tenant, Limits: lim, Demand: 10, Share: ShareAsk, ShareTerms: terms})
	v, err := rdb.HGet(ctx, Key(prefix, tenant), "sh").Result()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ParseShares(v)
	if err != nil {
		t.Fatal(err)
	}
	if held := gh.RateShare.Rate + gg.RateShare.Rate; rec.Committed+1e-9 < held {
		t.Errorf("the record commits %v while the shares in force hold %v (holder %v, ghost %v)", rec.Committed, held, gh.RateShare.Rate, gg.RateShare.Rate)
	}
}
