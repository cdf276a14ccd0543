package leasequota

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/lease"
)

// A Backend keeps the global buckets of the Limiters made by NewWithStore.
// It gives each Limiter its own view of them: Instance returns the view of
// the instance id, which counts as active on a tenant for window after
// each acquire. *memstore.Store (package lease/memstore) is the in-process
// Backend: the same semantics as Redis, in one process.
type Backend interface {
	Instance(id string, window time.Duration) (lease.Store, error)
}

// redisBackend is the Backend of a Limiter made by New: a lease.Client
// per instance on the user's Redis client.
type redisBackend struct {
	client redis.UniversalClient
	prefix string
}

// batchTenants is how many tenants one acquire script call carries on a
// single Redis server (lease.WithBatch): a call's fixed cost is shared by
// that many, while it holds Redis for no more than about that many
// acquires (a fraction of a millisecond).
const batchTenants = 8

func (r redisBackend) Instance(id string, window time.Duration) (lease.Store, error) {
	opts := []lease.ClientOption{lease.WithInstance(id, window)}
	// Only a client of one server may put several tenants' keys in one
	// call: a Cluster or a Ring spreads them over nodes.
	if _, single := r.client.(*redis.Client); single {
		opts = append(opts, lease.WithBatch(batchTenants))
	}
	c, err := lease.NewClient(r.client, r.prefix, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: WithKeyPrefix(%q): %s", ErrInvalidOption, r.prefix, stripPrefixes(err.Error()))
	}
	return c, nil
}
