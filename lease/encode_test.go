package lease

import (
	"context"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// plainAcquire is how an acquire's call was built before the encoder,
// each on its own: the reference the encoder's calls must equal, value
// and type, so that go-redis sends the same bytes.
func plainAcquire(c *Client, r Request) call {
	args := []interface{}{formatRate(r.Limits.Rate), strconv.FormatInt(r.Limits.Burst, 10), strconv.FormatInt(r.Want, 10)}
	key := c.Key(r.Tenant)
	keys := []string{key, InstancesKey(key), QuotaKey(key)}
	if c.instance != "" {
		demand := r.Demand
		if !(demand >= 0) || math.IsInf(demand, 0) {
			demand = 0
		}
		args = append(args, c.instance, strconv.FormatInt(c.window.Milliseconds(), 10), strconv.FormatFloat(demand, 'f', -1, 64))
		if r.Reserve > 0 || r.Share != ShareKeep {
			args = append(args, "")
			if r.Reserve > 0 {
				args[len(args)-1] = strconv.FormatInt(ceilMillis(r.Reserve), 10)
			}
		}
		switch r.Share {
		case ShareAsk:
			t := r.ShareTerms
			args = append(args, "A"+strconv.FormatInt(int64(t.Period/time.Microsecond), 10)+":"+strconv.FormatInt(int64(t.Phase/time.Microsecond), 10)+
				":"+strconv.FormatInt(int64(t.Hold/time.Microsecond), 10)+":"+strconv.FormatFloat(t.Headroom, 'f', -1, 64))
		case ShareEnd:
			args = append(args, "R"+strconv.FormatInt(r.ShareFrom.UnixMicro(), 10))
		}
	}
	return newCall(keys, args...)
}

// plainBatch is a batch's call as it was built: the tenants' keys, then
// their arguments, each padded to eight with "".
func plainBatch(calls []call) call {
	var keys []string
	var args []interface{}
	for _, cl := range calls {
		keys = append(keys, cl.keys...)
		args = append(args, cl.argv()...)
		for k := len(cl.argv()); k < 8; k++ {
			args = append(args, "")
		}
	}
	return newCall(keys, args...)
}

// TestEncoderSendsWhatPlainFormattingSends: the calls AcquireMany builds
// (one encoder for the whole pipeline, numbers shared between tenants)
// are those of building each on its own, in every form: without and with
// a registry, with a reservation, batched (WithBatch) with a last call of
// one tenant, with share operations (sent only with a registry; a hold
// of a fraction of a microsecond rounded down), for tenants whose keys
// escape or hash their names, and for
// numbers that repeat, that differ only in sign (-0) and that are not
// sent as given (a NaN demand is sent as 0).
func TestEncoderSendsWhatPlainFormattingSends(t *testing.T) {
	reqs := []Request{
		{Tenant: "a", Limits: Limits{Rate: 1e9, Burst: 1 << 30}, Want: 10},
		{Tenant: "b", Limits: Limits{Rate: 1e9, Burst: 1 << 30}, Want: 10},
		{Tenant: "c d{}%\x00é", Limits: Limits{Rate: 0.1, Burst: 3}, Want: 0, Demand: math.Copysign(0, -1)},
		{Tenant: "e", Limits: Limits{Rate: 0.1, Burst: 3}, Want: 1, Demand: 0},
		{Tenant: strings.Repeat("long", 40), Limits: Limits{Rate: 1.0 / 3, Burst: MaxBurst}, Want: 255, Demand: math.NaN()},
		{Tenant: "f", Limits: Limits{Rate: 1e-7, Burst: 1}, Want: 1, Demand: math.Inf(1), Reserve: 1500 * time.Microsecond},
		{Tenant: "g", Limits: Limits{Rate: MaxRate, Burst: 1}, Want: 1, Demand: 123.456789012345678, Reserve: time.Second},
		{Tenant: "h", Limits: Limits{Rate: MaxRate, Burst: 1}, Want: 1, Demand: 123.456789012345678},
		{Tenant: "i", Limits: Limits{Rate: 2, Burst: 2}, Want: 2, Demand: 2, Reserve: time.Second},
		{Tenant: "j", Limits: Limits{Rate: 2, Burst: 2}, Want: 0, Demand: 2, Share: ShareAsk,
			ShareTerms: ShareTerms{Period: 10 * time.Second, Phase: 1234567 * time.Microsecond, Hold: 500*time.Millisecond + 999, Headroom: 0.1}},
		{Tenant: "k", Limits: Limits{Rate: 2, Burst: 2}, Want: 1, Demand: 2, Reserve: time.Second, Share: ShareEnd, ShareFrom: time.UnixMicro(1_800_000_000_123_456)},
		{Tenant: "l", Limits: Limits{Rate: 2, Burst: 2}, Want: 1, Demand: 2, Share: ShareKeep, ShareFrom: time.UnixMicro(5)},
	}
	sent := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	for _, opts := range [][]ClientOption{
		nil,
		{WithBatch(4)},
		{WithInstance("i1", 2100*time.Millisecond)},
		{WithInstance("i1", 2100*time.Millisecond), WithBatch(4)},
		{WithInstance("i1", time.Minute), WithBatch(100)},
	} {
		c, err := NewClient(fakeNil{}, "p:", opts...)
		if err != nil {
			t.Fatal(err)
		}
		var want []call
		for lo := 0; lo < len(reqs); lo += c.batch {
			var group []call
			for _, r := range reqs[lo:min(lo+c.batch, len(reqs))] {
				group = append(group, plainAcquire(c, r))
			}
			if len(group) == 1 {
				want = append(want, group[0])
			} else {
				want = append(want, plainBatch(group))
			}
		}
		got := c.acquireCalls(reqs, sent)
		if len(got) != len(want) {
			t.Fatalf("instance %q, batch %d: %d calls, want %d", c.instance, c.batch, len(got), len(want))
		}
		for k := range got {
			acquireScript.fill(got[k])
			acquireScript.fill(want[k])
			if !reflect.DeepEqual(got[k].cmd, want[k].cmd) || !reflect.DeepEqual(got[k].keys, want[k].keys) {
				t.Errorf("instance %q, batch %d, call %d:\n got %#v\nwant %#v", c.instance, c.batch, k, got[k].cmd, want[k].cmd)
			}
			// What go-redis sends for it: the same command.
			if g, w := redis.NewCmd(context.Background(), got[k].cmd...).String(), redis.NewCmd(context.Background(), want[k].cmd...).String(); g != w {
				t.Errorf("call %d sends %q, want %q", k, g, w)
			}
		}
	}
}

// TestKeyLen: keyLen is the length of the key that Key returns.
func TestKeyLen(t *testing.T) {
	for _, tenant := range []string{"", "a", "a b", "{}", "%", "\xff\x00", strings.Repeat("x", maxLiteralTenant), strings.Repeat("x", maxLiteralTenant+1)} {
		if got, want := keyLen("p:", tenant), len(Key("p:", tenant)); got != want {
			t.Errorf("keyLen(%q) = %d, want %d", tenant, got, want)
		}
	}
}

// plainRelease is how a release's call was built before the encoder,
// with release id seq.
func plainRelease(c *Client, r ReleaseRequest, seq uint64) call {
	key := c.Key(r.Tenant)
	args := []interface{}{formatRate(r.Limits.Rate), strconv.FormatInt(r.Limits.Burst, 10), strconv.FormatInt(r.Amount, 10),
		strconv.FormatInt(ceilMillis(r.Age), 10), strconv.FormatUint(uint64(r.Grant), 10)}
	if c.instance != "" {
		args = append(args, c.instance+":"+strconv.FormatUint(seq, 10), strconv.FormatInt(ReleaseDedupWindow.Milliseconds(), 10))
	}
	return newCall([]string{key, ReleasesKey(key), QuotaKey(key)}, args...)
}

// TestEncodedReleasesAreThePlainOnes is TestEncoderSendsWhatPlainFormattingSends
// for releases: the ids count up from the client's sequence, in order.
func TestEncodedReleasesAreThePlainOnes(t *testing.T) {
	reqs := []ReleaseRequest{
		{Tenant: "a", Limits: Limits{Rate: 1e9, Burst: 1 << 30}, Amount: 10, Age: time.Second, Grant: 7},
		{Tenant: "b", Limits: Limits{Rate: 1e9, Burst: 1 << 30}, Amount: 10, Age: 1500 * time.Microsecond, Grant: math.MaxUint32},
		{Tenant: "c d{}", Limits: Limits{Rate: 0.25, Burst: 3}, Amount: 3, Age: 0},
		{Tenant: strings.Repeat("long", 40), Limits: Limits{Rate: 0.25, Burst: MaxBurst}, Amount: 1, Age: time.Hour, Grant: 1},
	}
	sent := []int{0, 1, 2, 3}
	for _, opts := range [][]ClientOption{nil, {WithInstance("i1", time.Minute)}} {
		c, err := NewClient(fakeNil{}, "p:", opts...)
		if err != nil {
			t.Fatal(err)
		}
		c.releases.Store(41)
		got := c.releaseCalls(reqs, sent)
		for j, r := range reqs {
			want := plainRelease(c, r, 42+uint64(j))
			releaseScript.fill(got[j])
			releaseScript.fill(want)
			if !reflect.DeepEqual(got[j].cmd, want.cmd) || !reflect.DeepEqual(got[j].keys, want.keys) {
				t.Errorf("instance %q, release %d:\n got %#v\nwant %#v", c.instance, j, got[j].cmd, want.cmd)
			}
		}
	}
}
