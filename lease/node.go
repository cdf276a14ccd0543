package lease

import "context"

// NodeOf names the Redis Cluster master that serves tenant's keys (its
// address), as the cluster client's slot map has it now, and reports true.
// It reports "", false when the client does not spread keys over nodes
// (its Scripter is not a *redis.ClusterClient) or when it knows no master
// for the tenant's slot.
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
