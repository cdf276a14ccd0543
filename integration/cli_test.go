package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// buildCLI builds cmd/leasequota (of the root module) into a directory of
// the test.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leasequota")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/leasequota")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/leasequota: %v\n%s", err, out)
	}
	return bin
}

// runCLI runs the binary and returns its stdout, failing the test on a
// nonzero exit status.
func runCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	t.Logf("leasequota %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
	if err != nil {
		t.Fatalf("leasequota %v: %v: %s", args, err, errb.String())
	}
	return out.String()
}

// TestCLIOnCluster runs the operator's command against a Redis Cluster:
// quotas of tenants on every master are set, listed, inspected and
// deleted, and top samples every master.
func TestCLIOnCluster(t *testing.T) {
	ctx := context.Background()
	bin := buildCLI(t)
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	prefix := redistest.Prefix(t)
	lc, err := lease.NewClient(rdb, prefix, lease.WithInstance("pod-1", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	global := []string{"-redis-cluster", strings.Join(cl.Addrs(), ","), "-prefix", prefix, "-json"}
	cli := func(args ...string) string { return runCLI(t, bin, append(global, args...)...) }

	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	onMaster := map[string]int{}
	for i := range n {
		tenant := fmt.Sprintf("tenant-%d", i)
		cli("quota", "set", "-rate", fmt.Sprint(10+i), "-burst", "100", tenant)
		for _, m := range masters {
			if m.Owns(int(lease.Slot(lc.Key(tenant)))) {
				onMaster[m.Addr]++
			}
		}
		if _, err := lc.Acquire(ctx, tenant, lease.Limits{Rate: 1, Burst: 1}, 60); err != nil {
			t.Fatal(err)
		}
	}
	if len(onMaster) != len(masters) {
		t.Fatalf("tenants on %d of %d masters: %v", len(onMaster), len(masters), onMaster)
	}
	// Each tenant's override, as the library reads it.
	for i := range n {
		o, err := lc.GetOverride(ctx, fmt.Sprintf("tenant-%d", i))
		if err != nil || o == nil || o.Rate != float64(10+i) || o.Burst != 100 {
			t.Fatalf("tenant-%d: override %+v, %v", i, o, err)
		}
	}

	listed := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(cli("quota", "list")))
	for sc.Scan() {
		var l struct {
			Tenant *string
			Quota  struct{ Rate float64 }
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Tenant == nil {
			t.Fatalf("list line %q: %v", sc.Text(), err)
		}
		listed[*l.Tenant] = l.Quota.Rate
	}
	if len(listed) != n || listed["tenant-7"] != 17 {
		t.Errorf("list found %d overrides (%v), want %d", len(listed), listed, n)
	}

	var in struct {
		Tenant    string
		Exists    bool
		Level     struct{ Tokens *float64 }
		Override  *struct{ Rate float64 }
		Instances []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(cli("inspect", "tenant-3")), &in); err != nil {
		t.Fatal(err)
	}
	if !in.Exists || in.Override == nil || in.Override.Rate != 13 || in.Level.Tokens == nil ||
		*in.Level.Tokens < 40 || *in.Level.Tokens > 100 || len(in.Instances) != 1 || in.Instances[0].ID != "pod-1" {
		t.Errorf("inspect tenant-3 = %+v", in)
	}

	cli("quota", "delete", "tenant-3")
	if o, err := lc.GetOverride(ctx, "tenant-3"); err != nil || o != nil {
		t.Errorf("tenant-3 after delete: %+v, %v", o, err)
	}

	// top: one SCAN per master per refresh; with -sample above the
	// keyspace, the first refresh reads every bucket.
	var f struct {
		ScanCalls int `json:"scan_calls"`
		Sampled   int `json:"sampled_keys"`
		Tenants   []struct{ Tenant string }
	}
	if err := json.Unmarshal([]byte(cli("top", "-once", "-n", "50", "-watch", "50", "-sample", "3000")), &f); err != nil {
		t.Fatal(err)
	}
	if f.ScanCalls != len(masters) || f.Sampled != n || len(f.Tenants) != n {
		t.Errorf("top: %d SCAN calls, %d sampled, %d tenants; want %d, %d, %d", f.ScanCalls, f.Sampled, len(f.Tenants), len(masters), n, n)
	}
}
