package lease

import (
	"context"
	"testing"
)

// TestAdminHadIsAnOverrideTheScriptsRead: a quota hash without both r and
// b is no override to any script (read_override, quota.lua's get) nor to
// GetOverride and ListOverrides. admin.lua took one for a stored override
// (EXISTS): quota delete said "override deleted" of it and raised the
// quota version (every instance then re-reads its tenants' quotas), and
// quota set reported had_override.
func TestAdminHadIsAnOverrideTheScriptsRead(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	for _, fields := range [][]any{{"b", "10"}, {"r", "5"}, {"n", "stray"}} {
		qkey := QuotaKey(c.Key("stray"))
		if err := rdb.HSet(ctx, qkey, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if o, err := c.GetOverride(ctx, "stray"); err != nil || o != nil {
			t.Fatalf("%v: GetOverride = %+v, %v; want none", fields, o, err)
		}
		v := quotaVersion(t, c)
		res, err := c.AdminDeleteOverride(ctx, "stray")
		if err != nil || res.Had {
			t.Errorf("%v: AdminDeleteOverride = %+v, %v; want Had false", fields, res, err)
		}
		if got := quotaVersion(t, c); got != v {
			t.Errorf("%v: the quota version went from %d to %d for a delete of no override", fields, v, got)
		}
		if err := rdb.HSet(ctx, qkey, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if res, err := c.AdminSetOverride(ctx, "stray", Override{Rate: 1, Burst: 10}); err != nil || res.Had {
			t.Errorf("%v: AdminSetOverride = %+v, %v; want Had false", fields, res, err)
		}
		if err := rdb.Del(ctx, qkey).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
