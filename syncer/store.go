package syncer

import (
	"context"
	"fmt"

	"github.com/leasequota/leasequota/lease"
)

// acquireOne is one acquire through st, as AcquireMany of one request: a
// lease.Store has no single acquire. Its error is the request's own, what
// lease.Client.Acquire would return; for a batch of one,
// AcquireMany's batch error adds nothing to it. A Store that answers with
// other than one result gets an error wrapping lease.ErrBadReply rather
// than a panic.
func acquireOne(ctx context.Context, st lease.Store, r lease.Request) (lease.Grant, error) {
	res, err := st.AcquireMany(ctx, []lease.Request{r}, nil)
	if len(res) != 1 {
		return lease.Grant{}, fmt.Errorf("%w: the store answered 1 acquire with %d results (batch error: %v)", lease.ErrBadReply, len(res), err)
	}
	return res[0].Grant, res[0].Err
}
