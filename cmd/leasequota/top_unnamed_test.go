package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasequota/leasequota/lease"
)

// TestTopJSONTellsAnUnknownNameFromTheEmptyOne: top -json writes a
// tenant whose name it does not know (a hashed key, a tenant over 128
// bytes without an override naming it) with "tenant": null, as quota list
// -json does, not as "", the name of another tenant (whose key is
// {t:}). Both were written "tenant": "".
func TestTopJSONTellsAnUnknownNameFromTheEmptyOne(t *testing.T) {
	ctx := context.Background()
	c, _, lc := newCLI(t)
	long := strings.Repeat("x", 200)
	for _, tenant := range []string{"", long} {
		if _, err := lc.Acquire(ctx, tenant, lease.Limits{Rate: 1, Burst: 100}, 20); err != nil {
			t.Fatal(err)
		}
	}
	out := c.mustRun("-json", "top", "-once")
	var frame struct {
		Tenants []struct {
			Tenant *string `json:"tenant"`
			Key    string  `json:"key"`
		} `json:"tenants"`
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatalf("no frame in %q", out)
	}
	if err := json.Unmarshal(sc.Bytes(), &frame); err != nil {
		t.Fatal(err)
	}
	got := map[string]*string{}
	for _, r := range frame.Tenants {
		got[r.Key] = r.Tenant
	}
	if n, ok := got[lc.Key("")]; !ok || n == nil || *n != "" {
		t.Errorf("the empty tenant's row: %v, %v; want \"tenant\": \"\" (%s)", ok, n, out)
	}
	if n, ok := got[lc.Key(long)]; !ok || n != nil {
		t.Errorf("the hashed tenant's row: found %v, want it with \"tenant\": null (%s)", ok, out)
	}
	// The text view tells them apart as before.
	text := c.mustRun("top", "-once")
	if !strings.Contains(text, "(hashed) ") || !strings.Contains(text, "\n\"\"  ") {
		t.Errorf("top -once does not show both:\n%s", text)
	}
}
