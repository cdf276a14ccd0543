package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestInspectSaysWhyTheLevelIsUnknown: inspect prints why it cannot tell
// the level of a bucket without an override. It printed "no TTL to tell
// the rate" for every such bucket, one whose key has a TTL too: a bucket
// 50 ms from full, too near for the TTL (millisecond resolution) to tell
// the rate, read as a key without expiry.
func TestInspectSaysWhyTheLevelIsUnknown(t *testing.T) {
	now := time.Now().UnixMicro()
	bucket := lease.BucketState{Key: "p{t:acme}", Tenant: "acme", Named: true, Now: now, Exists: true,
		Tokens: 95, Updated: now, Burst: 100}
	for _, tc := range []struct {
		ttl      time.Duration
		want     string
		wantNone string
	}{
		{1050 * time.Millisecond, "too near full", "no TTL"},
		{-1, "no TTL", "too near full"},
	} {
		in := lease.Inspection{BucketState: bucket}
		in.TTL = tc.ttl
		lv := in.Level()
		if lv.Known {
			t.Fatalf("TTL %v: the level is known (%+v); the test wants a bucket whose level is not", tc.ttl, lv)
		}
		var out bytes.Buffer
		printInspection(&env{stdout: &out}, in, lv)
		line := ""
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "tokens now") {
				line = l
			}
		}
		if !strings.Contains(line, tc.want) || strings.Contains(line, tc.wantNone) {
			t.Errorf("key TTL %v: inspect printed %q; want it to say %q, not %q", tc.ttl, line, tc.want, tc.wantNone)
		}
	}
}
