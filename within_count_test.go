package leasequota_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// decisionsDelta returns the admissions and denials Stats counted between
// before and after.
func decisionsDelta(before, after map[leasequota.Reason]leasequota.Outcomes) (allowed, denied int64) {
	for r, o := range after {
		allowed += o.Allowed - before[r].Allowed
		denied += o.Denied - before[r].Denied
	}
	return allowed, denied
}

// TestWithinCountsOneDecision: AllowNWithin and AllowAllWithin that deny,
// wait and admit are one decision each, an admission. Each counted the
// denial that made it wait besides (Stats, and the decisions metric the
// HTTP middleware's requests feed: every request that waited showed as a
// 429 too).
func TestWithinCountsOneDecision(t *testing.T) {
	l := newLimiter(t, setup(t), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 1}))
	ctx := context.Background()
	for l.Allow("b") {
	}
	for l.Allow("a") {
	}
	before := l.Stats().Decisions
	if d := l.AllowNWithin(ctx, "a", 1, time.Second); !d.Allowed {
		t.Fatalf("AllowNWithin: %+v, want admitted after a wait", d)
	}
	after := l.Stats().Decisions
	if allowed, denied := decisionsDelta(before, after); allowed != 1 || denied != 0 {
		t.Errorf("one AllowNWithin admitted after a wait: counted %d admissions and %d denials, want 1 and 0 (%v -> %v)", allowed, denied, before, after)
	}
	for l.Allow("a") {
	}
	before = l.Stats().Decisions
	if d := l.AllowAllWithin(ctx, 1, time.Second, "a", "b"); !d.Allowed {
		t.Fatalf("AllowAllWithin: %+v, want admitted after a wait", d)
	}
	after = l.Stats().Decisions
	// An admitted AllowAll counts an admission per tenant (Spend counts on
	// each): 2 here, and no denial.
	if allowed, denied := decisionsDelta(before, after); allowed != 2 || denied != 0 {
		t.Errorf("one AllowAllWithin of 2 tenants admitted after a wait: counted %d admissions and %d denials, want 2 and 0 (%v -> %v)", allowed, denied, before, after)
	}
}
