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

func (r redisBackend) Instance(id string, window time.Duration) (lease.Store, error) {
	c, err := lease.NewClient(r.client, r.prefix, lease.WithInstance(id, window))
	if err != nil {
		return nil, fmt.Errorf("%w: WithKeyPrefix(%q): %s", ErrInvalidOption, r.prefix, stripPrefixes(err.Error()))
	}
	return c, nil
}
