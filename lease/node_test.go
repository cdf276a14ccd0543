package lease

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// slotRouter is a Scripter with a cluster client's routing: keys in even
// slots live on one node, keys in odd slots on another, and keys in slot
// 0 on none (MasterForKey fails). It sends nothing anywhere.
type slotRouter struct {
	*redis.Client // never used: NodeOf only routes
	even, odd     *redis.Client
	asked         []string // keys MasterForKey was asked about
}

func (r *slotRouter) MasterForKey(_ context.Context, key string) (*redis.Client, error) {
	r.asked = append(r.asked, key)
	switch s := Slot(key); {
	case s == 0:
		return nil, errors.New("no master for slot 0")
	case s%2 == 0:
		return r.even, nil
	default:
		return r.odd, nil
	}
}

func (r *slotRouter) ReloadState(context.Context) {}

// TestNodeOf checks that NodeOf names the master the cluster client routes
// a tenant's bucket key to, and reports false without a cluster client or
// a master.
func TestNodeOf(t *testing.T) {
	ctx := context.Background()
	opts := func(addr string) *redis.Options { return &redis.Options{Addr: addr} }
	r := &slotRouter{Client: redis.NewClient(opts("unused:1")), even: redis.NewClient(opts("even:1")), odd: redis.NewClient(opts("odd:1"))}
	defer r.Client.Close()
	defer r.even.Close()
	defer r.odd.Close()
	const prefix = "lq:"
	c, err := NewClient(r, prefix)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tenant := range []string{"a", "b", "c", "d", "e", "f", "{odd}", "very long " + string(make([]byte, 200))} {
		want := "odd:1"
		if Slot(Key(prefix, tenant))%2 == 0 {
			want = "even:1"
		}
		got, ok := c.NodeOf(ctx, tenant)
		if !ok || got != want {
			t.Errorf("NodeOf(%q) = %q, %v; want %q, true", tenant, got, ok, want)
		}
		seen[got] = true
		if last := r.asked[len(r.asked)-1]; last != Key(prefix, tenant) {
			t.Errorf("NodeOf(%q) routed key %q, want the bucket key %q", tenant, last, Key(prefix, tenant))
		}
	}
	if len(seen) != 2 {
		t.Errorf("the tenants landed on %v: pick tenants on both nodes", seen)
	}

	// A tenant whose slot has no master: unknown.
	var zero string
	for i := 0; ; i++ {
		zero = "t" + strconv.Itoa(i)
		if Slot(Key(prefix, zero)) == 0 {
			break
		}
	}
	if got, ok := c.NodeOf(ctx, zero); ok || got != "" {
		t.Errorf("NodeOf(%q) in a slot without master = %q, %v; want \"\", false", zero, got, ok)
	}

	// A client on one node does not tell nodes apart.
	single := redis.NewClient(opts("single:1"))
	defer single.Close()
	sc, err := NewClient(single, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := sc.NodeOf(ctx, "a"); ok || got != "" {
		t.Errorf("NodeOf on a *redis.Client = %q, %v; want \"\", false", got, ok)
	}
}
