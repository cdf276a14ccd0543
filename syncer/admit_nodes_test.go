package syncer

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestAdmitGivesTurnsOnEachNode: in Cluster mode, with the windows of two
// masters both short, each master's tenants get their turns as a single
// node's do (TestAdmitGivesTurns): with every tenant asking every round,
// each is admitted within ceil(n/g)+1 rounds of its master's n tenants
// and g places. The next short round started at the first call refused on
// any master, so a master whose tenants are few followed the turns of a
// master with many: the same few of its tenants were admitted round after
// round, and the others waited until the other master's turns came past
// them.
func TestAdmitGivesTurnsOnEachNode(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		now := time.Unix(1_800_000_000, 0)
		view, err := memstore.New().Instance("me", time.Second)
		if err != nil {
			rt.Fatal(err)
		}
		s := New(view, Options{Now: func() time.Time { return now }, Cluster: true,
			Planner: NewPlanner(Config{}, rapid.Uint64().Draw(rt, "seed"))})
		defer s.Close()
		nodes := []string{"a", "b"}
		n := map[string]int{"a": rapid.IntRange(1, 300).Draw(rt, "tenants a"), "b": rapid.IntRange(1, 300).Draw(rt, "tenants b")}
		g := map[string]int{"a": rapid.IntRange(1, 20).Draw(rt, "window a"), "b": rapid.IntRange(1, 20).Draw(rt, "window b")}
		var cands []job
		limit := map[string]int{} // the rounds within which a node's tenants all get a turn
		rounds := 0
		for _, node := range nodes {
			for i := range n[node] {
				tn, err := s.Track(fmt.Sprintf("%s%d", node, i), quota.Quota{Rate: 10, Burst: 10})
				if err != nil {
					rt.Fatal(err)
				}
				cands = append(cands, job{t: tn, node: node})
			}
			limit[node] = (n[node]+g[node]-1)/g[node] + 1
			rounds = max(rounds, limit[node])
		}
		first := map[*Tenant]int{} // the round a tenant was first admitted in
		for r := range rounds {
			for _, node := range nodes {
				b := &s.node(node).budget
				b.mu.Lock()
				b.window, b.inFlight, b.calmAfter = float64(g[node]), 0, now.Add(time.Hour)
				b.mu.Unlock()
			}
			jobs, _ := s.admit(now, append([]job(nil), cands...))
			for _, j := range jobs {
				if _, ok := first[j.t]; !ok {
					first[j.t] = r
				}
			}
		}
		for _, j := range cands {
			if r, ok := first[j.t]; !ok || r >= limit[j.node] {
				rt.Fatalf("tenant %s of master %s (%d tenants, %d places) not admitted in its first %d rounds (first admitted in round %d, %v)",
					j.t.name, j.node, n[j.node], g[j.node], limit[j.node], r, ok)
			}
		}
	})
}
