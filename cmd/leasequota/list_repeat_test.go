package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/lease"
)

// scanTwice is a go-redis hook that makes every SCAN reply give each of
// its keys twice, as SCAN may (Redis rehashing, a Cluster reshard).
type scanTwice struct{}

func (scanTwice) DialHook(next redis.DialHook) redis.DialHook { return next }
func (scanTwice) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (scanTwice) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if sc, ok := cmd.(*redis.ScanCmd); ok && err == nil {
			keys, cursor := sc.Val()
			sc.SetVal(append(keys, keys...), cursor)
		}
		return err
	}
}

// TestQuotaListKeyScannedTwice: quota list reports each override once
// however often SCAN returns its key, the unreadable ones too. The check
// for a key seen came after the branch of an override that cannot be
// read, so such a key, returned twice by SCAN, was reported twice on
// stderr and counted twice in the exit error. Real Redis, its SCAN
// replies doubled by a client hook.
func TestQuotaListKeyScannedTwice(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	for _, tenant := range []string{"good", "bad"} {
		if _, err := lc.AdminSetOverride(ctx, tenant, lease.Override{Rate: 1, Burst: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.HSet(ctx, lease.QuotaKey(lc.Key("bad")), "b", "many").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(scanTwice{})
	doubled, err := lease.NewClient(rdb, c.prefix)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	e := &env{client: doubled, timeout: 5 * time.Second, stdout: &stdout, stderr: &stderr}
	err = quotaList(ctx, e, nil)
	t.Logf("stdout:\n%s\nstderr:\n%s\nerr: %v", stdout.String(), stderr.String(), err)
	if n := strings.Count(stdout.String(), "good"); n != 1 {
		t.Errorf("the readable override is listed %d times, want once", n)
	}
	if n := strings.Count(stderr.String(), "leasequota: quota list:"); n != 1 {
		t.Errorf("the unreadable override is reported %d times, want once", n)
	}
	if !errors.Is(err, errListing) || !strings.HasSuffix(err.Error(), ": 1") {
		t.Errorf("quotaList returned %v, want errListing counting 1", err)
	}
}
