package lease

import "context"

// NodeOf names the Redis Cluster master that serves tenant's keys (its
// address), as the cluster client's slot map has it now, and reports true.
// It reports "", false when the client does not spread keys over nodes
// (its Scripter is not a *redis.ClusterClient) or when the slot map cannot
// be loaded. For a slot that no master serves (a cluster with slots left
// uncovered, or deleted) go-redis v9's MasterForKey names a random node,
// replicas included, and so does NodeOf: such a tenant's calls are kept
// apart with that node's, whose call window and turn they then share
// until the slot is served again.
//
// It costs the tenant's key and a look-up in go-redis's slot map: no
// round trip, except the one that loads the slot map if the cluster
// client has sent nothing yet (bounded by ctx).
//
// The answer may be stale during a failover or a resharding: that is
// harmless, since every call is still routed by go-redis (which follows
// MOVED and ASK, and reloads its map). NodeOf only lets a caller keep the
// calls of different nodes apart, so that a dead or slow node does not
// hold up the tenants of the others (see package syncer, NodeLocator).
func (c *Client) NodeOf(ctx context.Context, tenant string) (string, bool) {
	cr, ok := c.s.(clusterRouter)
	if !ok {
		return "", false
	}
	node, err := cr.MasterForKey(ctx, c.Key(tenant))
	if err != nil || node == nil {
		return "", false
	}
	return node.Options().Addr, true
}
