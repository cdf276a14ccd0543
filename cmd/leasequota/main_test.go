package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
)

// binary is the command, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasequota-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "leasequota")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	redisserver.Main(m, func() { os.RemoveAll(dir) })
}

// cli runs the built command against srv under prefix.
type cli struct {
	t      *testing.T
	srv    *redisserver.Server
	prefix string
}

func newCLI(t *testing.T) (*cli, *redis.Client, *lease.Client) {
	t.Helper()
	srv := redisserver.Shared(t)
	c := &cli{t: t, srv: srv, prefix: redisserver.Prefix(t)}
	rdb := redisserver.Client(t)
	lc, err := lease.NewClient(rdb, c.prefix)
	if err != nil {
		t.Fatal(err)
	}
	return c, rdb, lc
}

// run runs the command with the global flags and args.
func (c *cli) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	all := append([]string{"-redis", c.srv.URL(), "-prefix", c.prefix}, args...)
	return runBinary(c.t, all...)
}

func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	t.Logf("leasequota %s -> %d\nstdout: %s\nstderr: %s", strings.Join(shorten(args), " "), code, out.String(), errb.String())
	return out.String(), errb.String(), code
}

func shorten(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 80 {
			a = a[:40] + "…(" + strconv.Itoa(len(a)) + " bytes)"
		}
		out[i] = a
	}
	return out
}

// mustRun runs args and fails unless the exit status is 0.
func (c *cli) mustRun(args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("leasequota %v: exit %d: %s", args, code, errs)
	}
	return out
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// keysUnder returns the keys under prefix.
func keysUnder(t *testing.T, rdb *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestQuotaCommands sets, reads, lists and deletes an override through
// the binary, and checks each against the library.
func TestQuotaCommands(t *testing.T) {
	ctx := context.Background()
	c, _, lc := newCLI(t)
	out := c.mustRun("quota", "set", "-rate", "250.5", "-burst", "500", "-lease-ttl", "3s", "-failure-mode", "fail_closed", "acme")
	if !strings.Contains(out, "acme: quota set: rate 250.5/s, burst 500") {
		t.Errorf("set printed %q", out)
	}
	o, err := lc.GetOverride(ctx, "acme")
	want := lease.Override{Rate: 250.5, Burst: 500, LeaseTTL: 3 * time.Second, Mode: 2}
	if err != nil || o == nil || *o != want {
		t.Fatalf("stored override %+v, %v; want %+v", o, err, want)
	}
	if v, _ := lc.QuotaVersion(ctx); v != 1 {
		t.Errorf("quota version %d after a set, want 1", v)
	}
	c.mustRun("quota", "set", "-rate", "1", "-burst", "2", "tenant with spaces")
	// A name with a terminal's escape sequence is printed quoted, not
	// sent to the terminal as it is.
	if out := c.mustRun("quota", "set", "-rate", "1", "-burst", "2", "evil\x1b[2Jname"); !strings.Contains(out, `"evil\x1b[2Jname": quota set`) {
		t.Errorf("set of a name with an escape sequence printed %q", out)
	}
	if _, err := lc.AdminDeleteOverride(ctx, "evil\x1b[2Jname"); err != nil {
		t.Fatal(err)
	}
	// A rate of seven digits is printed as stored, not rounded to six.
	if out := c.mustRun("quota", "set", "-rate", "1234567", "-burst", "10", "precise"); !strings.Contains(out, "rate 1.234567e+06/s") {
		t.Errorf("set of a rate of 1234567 printed %q", out)
	}
	if _, err := lc.AdminDeleteOverride(ctx, "precise"); err != nil {
		t.Fatal(err)
	}

	got := decode[struct {
		Tenant string
		Quota  *quotaJSON
	}](t, c.mustRun("-json", "quota", "get", "acme"))
	if got.Tenant != "acme" || got.Quota == nil || got.Quota.Rate != 250.5 || got.Quota.Burst != 500 ||
		got.Quota.LeaseTTL != "3s" || got.Quota.FailureMode != "fail_closed" {
		t.Errorf("get -json = %+v %+v", got, got.Quota)
	}
	if out := c.mustRun("quota", "get", "acme"); !strings.Contains(out, "rate 250.5/s, burst 500, lease TTL 3s, failure mode fail_closed") {
		t.Errorf("get printed %q", out)
	}
	// -json after the command is the global -json: the same output.
	if a, b := c.mustRun("-json", "quota", "get", "acme"), c.mustRun("quota", "get", "-json", "acme"); a != b {
		t.Errorf("quota get -json printed %q, -json quota get %q", b, a)
	}
	if a, b := c.mustRun("-json", "quota", "list"), c.mustRun("quota", "list", "-json"); a != b {
		t.Errorf("quota list -json printed %q, -json quota list %q", b, a)
	}

	listed := map[string]quotaJSON{}
	sc := bufio.NewScanner(strings.NewReader(c.mustRun("-json", "quota", "list")))
	for sc.Scan() {
		l := decode[struct {
			Tenant *string
			Quota  quotaJSON
		}](t, sc.Text())
		if l.Tenant == nil {
			t.Fatalf("unnamed entry %s", sc.Text())
		}
		listed[*l.Tenant] = l.Quota
	}
	if len(listed) != 2 || listed["acme"].Burst != 500 || listed["tenant with spaces"].Rate != 1 {
		t.Errorf("list -json = %+v", listed)
	}
	if out := c.mustRun("quota", "list"); !strings.Contains(out, `"tenant with spaces"`) || !strings.Contains(out, "acme") {
		t.Errorf("list printed %q", out)
	}

	if out := c.mustRun("quota", "delete", "acme"); !strings.Contains(out, "override deleted") {
		t.Errorf("delete printed %q", out)
	}
	if o, err := lc.GetOverride(ctx, "acme"); err != nil || o != nil {
		t.Errorf("override after delete %+v, %v", o, err)
	}
	if out := c.mustRun("quota", "delete", "acme"); !strings.Contains(out, "no override to delete") {
		t.Errorf("second delete printed %q", out)
	}
	if got := decode[struct{ Quota *quotaJSON }](t, c.mustRun("-json", "quota", "get", "acme")); got.Quota != nil {
		t.Errorf("get after delete = %+v", got.Quota)
	}
}

// TestSetAndDeleteNeedNoDefaultQuota: a service drained its bucket at a
// quota the command does not know; set does not refill it at any rate,
// delete refills at the override's rate alone and leaves the services'
// rate to their next acquire.
func TestSetAndDeleteNeedNoDefaultQuota(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	services := lease.Limits{Rate: 1e9, Burst: 100} // refills 1,000 tokens a microsecond
	if g, err := lc.Acquire(ctx, "acme", services, 100); err != nil || g.Granted != 100 {
		t.Fatalf("drain: %+v, %v", g, err)
	}
	set := decode[struct {
		HadOverride  bool     `json:"had_override"`
		BucketTokens *float64 `json:"bucket_tokens"`
	}](t, c.mustRun("-json", "quota", "set", "-rate", "0.001", "-burst", "10", "acme"))
	if set.HadOverride || set.BucketTokens == nil || *set.BucketTokens != 0 {
		t.Errorf("set = %+v, want the drained level kept: 0 tokens", set)
	}
	if g, err := lc.Acquire(ctx, "acme", services, 100); err != nil || g.Granted != 0 {
		t.Errorf("acquire after set = %+v, %v; want 0 (the override's rate refilled next to nothing)", g, err)
	}
	c.mustRun("quota", "delete", "acme")
	in, err := lc.Inspect(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if in.Tokens >= 1 || in.TTL != -1 || in.Override != nil {
		t.Errorf("after delete: %v tokens, TTL %v, override %+v; want under a token, kept without expiry, no override", in.Tokens, in.TTL, in.Override)
	}
	if g, err := lc.Acquire(ctx, "acme", services, 1000); err != nil || g.Granted != 100 {
		t.Errorf("acquire after delete = %+v, %v; want the services' burst, 100", g, err)
	}
	if ttl := rdb.PTTL(ctx, lc.Key("acme")).Val(); ttl <= 0 {
		t.Errorf("bucket TTL %v after the services' acquire, want one", ttl)
	}
}

// TestBadUsage: each bad command line exits 2 with a message naming what
// is wrong, and writes nothing.
func TestBadUsage(t *testing.T) {
	c, rdb, _ := newCLI(t)
	huge := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"quota", "set", "-rate", "NaN", "-burst", "10", "t"}, "-rate"},
		{[]string{"quota", "set", "-rate", "-5", "-burst", "10", "t"}, "-rate"},
		{[]string{"quota", "set", "-rate", "0", "-burst", "10", "t"}, "-rate"},
		{[]string{"quota", "set", "-rate", "+Inf", "-burst", "10", "t"}, "-rate"},
		{[]string{"quota", "set", "-burst", "10", "t"}, "-rate is required"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "0", "t"}, "-burst"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "1.5", "t"}, "-burst"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "10", "-lease-ttl", "-1s", "t"}, "-lease-ttl"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "10", "-max-lease", "11", "t"}, "-max-lease"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "10", "-failure-mode", "maybe", "t"}, "-failure-mode"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "10", huge}, "TENANT is 102400 bytes"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "10"}, "want a TENANT"},
		{[]string{"quota", "set", "-rate", "1", "-burst", "10", "t", "-x"}, "want one TENANT"},
		{[]string{"quota", "get", huge}, "TENANT is 102400 bytes"},
		{[]string{"quota", "delete"}, "want a TENANT"},
		{[]string{"quota", "list", "extra"}, "takes no arguments"},
		{[]string{"quota", "rename", "t"}, `unknown subcommand "rename"`},
		{[]string{"quota"}, "want a subcommand"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"inspect"}, "want a TENANT"},
		{[]string{"top", "-n", "0"}, "-n 0"},
		{[]string{"top", "-sample", "0"}, "-sample 0"},
		{[]string{"top", "-n", "20", "-watch", "5"}, "-watch 5"},
		{[]string{"top", "-interval", "1ms"}, "-interval"},
		{[]string{"top", "-bogus"}, "-bogus"},
		{[]string{"-prefix", "a{b", "quota", "list"}, "-prefix"},
		{[]string{"-timeout", "0s", "quota", "list"}, "-timeout"},
	} {
		_, stderr, code := c.run(tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming %q", shorten(tc.args), code, stderr, tc.want)
		}
		if len(stderr) > 4096 {
			t.Errorf("%v: a %d-byte message", shorten(tc.args), len(stderr))
		}
	}
	if keys := keysUnder(t, rdb, c.prefix); len(keys) != 0 {
		t.Errorf("bad usage wrote %v", keys)
	}
	// -help is not an error.
	if _, stderr, code := c.run("top", "-help"); code != 0 || !strings.Contains(stderr, "per refresh") {
		t.Errorf("top -help: exit %d, %q", code, stderr)
	}
	if _, _, code := runBinary(t); code != exitUsage {
		t.Errorf("no arguments: exit %d, want 2", code)
	}
}

// TestFailureExitsOne: Redis unreachable is a failure (1), not bad usage.
func TestFailureExitsOne(t *testing.T) {
	srv := redisserver.StartServer(t)
	url := srv.URL()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"quota", "get", "t"}, {"quota", "set", "-rate", "1", "-burst", "1", "t"}, {"quota", "list"}, {"inspect", "t"}, {"top", "-once"}} {
		_, stderr, code := runBinary(t, append([]string{"-redis", url, "-timeout", "100ms"}, args...)...)
		if code != exitFailure || !strings.HasPrefix(stderr, "leasequota: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v on a stopped server: exit %d, stderr %q; want 1 and one line", args, code, stderr)
		}
	}
}

// TestInspectCommand: inspect shows the level, the override, the
// instances and the history that the services left.
func TestInspectCommand(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	lim := lease.Limits{Rate: 10, Burst: 1000}
	for _, id := range []string{"pod-1", "pod-2"} {
		inst, err := lease.NewClient(rdb, c.prefix, lease.WithInstance(id, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		res, err := inst.AcquireMany(ctx, []lease.Request{{Tenant: "acme", Limits: lim, Want: 400, Demand: 30}}, nil)
		if err != nil || res[0].Err != nil || res[0].Grant.Granted != 400 {
			t.Fatalf("acquire: %+v, %v", res, err)
		}
	}
	in := decode[inspectJSON](t, c.mustRun("-json", "inspect", "acme"))
	if !in.Exists || in.Tenant != "acme" || in.Key != lc.Key("acme") || in.Override != nil {
		t.Fatalf("inspect = %+v", in)
	}
	if in := decode[inspectJSON](t, c.mustRun("inspect", "-json", "acme")); !in.Exists || in.Tenant != "acme" {
		t.Errorf("inspect -json acme = %+v, want what -json inspect acme says", in)
	}
	if in.Level.Source != "ttl_estimate" || in.Level.Rate == nil || math.Abs(*in.Level.Rate-10) > 0.1 ||
		in.Level.Tokens == nil || *in.Level.Tokens < 200 || *in.Level.Tokens > 210 {
		t.Errorf("level %+v, want about 200 tokens at an estimated 10/s", in.Level)
	}
	if len(in.Instances) != 2 || in.Instances[0].ID != "pod-1" || in.Instances[1].Demand == nil || *in.Instances[1].Demand != 30 {
		t.Errorf("instances %+v", in.Instances)
	}
	if in.Registry == nil || in.Registry.Instances != 2 || len(in.History) == 0 {
		t.Errorf("registry %+v, history %+v", in.Registry, in.History)
	}
	if !in.Instances[0].Shares || in.Shares != nil {
		t.Errorf("instances %+v, shares %+v: want entries that honour shares, none in force", in.Instances, in.Shares)
	}
	c.mustRun("quota", "set", "-rate", "5", "-burst", "300", "acme")
	text := c.mustRun("inspect", "acme")
	for _, want := range []string{"tokens now", "(the override's rate 5/s)", "override     rate 5/s, burst 300", "pod-1", "pod-2", "level history"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect text lacks %q:\n%s", want, text)
		}
	}
	// A record of rate shares (which no release writes yet): shown, and
	// the level refills at the override's rate less the shares.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	sh := lease.Shares{Epoch: now.UnixMicro() / 60e6, Committed: 4, Booked: 1, Period: 60e6}
	if err := rdb.HSet(ctx, lc.Key("acme"), "sh", sh.String()).Err(); err != nil {
		t.Fatal(err)
	}
	in = decode[inspectJSON](t, c.mustRun("-json", "inspect", "acme"))
	if in.Shares == nil || in.Shares.Committed != 4 || in.Shares.Booked != 1 || in.Shares.PeriodUs != 60e6 {
		t.Errorf("shares %+v, want %+v", in.Shares, sh)
	}
	if text := c.mustRun("inspect", "acme"); !strings.Contains(text, "rate shares  4/s in force, 1/s of it booked") {
		t.Errorf("inspect text lacks the shares:\n%s", text)
	}
	// An instance holding a rate share: shown with it, in force.
	inst, err := lease.NewClient(rdb, c.prefix, lease.WithInstance("pod-9", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	res, err := inst.AcquireMany(ctx, []lease.Request{{Tenant: "beta", Limits: lim, Demand: 4, Share: lease.ShareAsk,
		ShareTerms: lease.ShareTerms{Period: time.Minute, Hold: time.Second}}}, nil)
	if err != nil || res[0].Err != nil || res[0].Grant.RateShare.Rate != 4 {
		t.Fatalf("share: %+v, %v", res, err)
	}
	in = decode[inspectJSON](t, c.mustRun("-json", "inspect", "beta"))
	if len(in.Instances) != 1 || in.Instances[0].RateShare == nil || in.Instances[0].RateShare.Rate != 4 || !in.Instances[0].RateShare.InForce ||
		in.Shares == nil || in.Shares.Committed != 4 {
		t.Errorf("inspect of a share held: instances %+v, shares %+v", in.Instances, in.Shares)
	}
	if text := c.mustRun("inspect", "beta"); !strings.Contains(text, "RATE SHARE") || !strings.Contains(text, "4/s for ") {
		t.Errorf("inspect text lacks the share held:\n%s", text)
	}
	if in := decode[inspectJSON](t, c.mustRun("-json", "inspect", "nobody")); in.Exists || !in.Level.Full || in.Level.Tokens != nil {
		t.Errorf("inspect of an unknown tenant = %+v", in)
	}
}

// topFrameJSON is a line of top -json.
type topFrameJSON struct {
	Refresh     int
	ScanCalls   int `json:"scan_calls"`
	Sampled     int `json:"sampled_keys"`
	BucketReads int `json:"bucket_reads"`
	Watched     int
	Tenants     []struct {
		Tenant    string
		Granted   *float64 `json:"granted_per_s"`
		Level     *float64
		Burst     *int64
		Instances *int
	}
}

func frames(t *testing.T, out string) []topFrameJSON {
	t.Helper()
	var fs []topFrameJSON
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fs = append(fs, decode[topFrameJSON](t, sc.Text()))
	}
	return fs
}

// TestTopFindsTheBusiestTenant: with one tenant taking its whole rate and
// 30 idle ones, top ranks the busy one first with about its rate granted.
//
// It has a server of its own: on the package's shared server, each
// refresh's SCAN of 200 keys looked at other tests' keys too (and at this
// test's of earlier runs with -count), so the hot bucket could be first
// read at the last refresh, its rate not yet known ("hot granted <nil>/s").
// The hot bucket is made before top starts, and each of its lease calls
// asks for the whole burst, so that the rate granted is the bucket's
// refill however few calls the loop gets in on a loaded machine (at 5
// tokens a call it was the loop's pace: 100 calls a second were needed).
func TestTopFindsTheBusiestTenant(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartServer(t)
	rdb := srv.Client()
	c := &cli{t: t, srv: srv, prefix: redisserver.Prefix(t)}
	// After the server started: its process is stopped when the test
	// ends (a cleanup), after this check; the client is closed before it.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer rdb.Close()
	inst, err := lease.NewClient(rdb, c.prefix, lease.WithInstance("pod-1", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Each idle bucket is 20 s from full, so that its key outlives the
	// test however slowly it runs: with Rate 100, one token refilled in
	// 10 ms and the key expired 1.01 s on, before the last step's
	// "top -once" on a loaded machine.
	for i := range 30 {
		if _, err := inst.Acquire(ctx, fmt.Sprintf("idle-%d", i), lease.Limits{Rate: 1, Burst: 100}, 20); err != nil {
			t.Fatal(err)
		}
	}
	// The hot tenant asks for 2,500 tokens/s of its 500/s, each call for
	// all the bucket holds.
	hot := lease.Request{Tenant: "hot", Limits: lease.Limits{Rate: 500, Burst: 500}, Want: 500, Demand: 2500}
	if _, err := inst.AcquireMany(ctx, []lease.Request{hot}, nil); err != nil {
		t.Fatal(err)
	}
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := inst.AcquireMany(loopCtx, []lease.Request{hot}, nil); err != nil && loopCtx.Err() == nil {
				t.Error(err)
				return
			}
			select {
			case <-loopCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	out := c.mustRun("-json", "top", "-iterations", "3", "-interval", "400ms", "-n", "5", "-watch", "10", "-sample", "200")
	stop()
	wg.Wait()
	fs := frames(t, out)
	if len(fs) != 3 {
		t.Fatalf("%d frames, want 3", len(fs))
	}
	for _, f := range fs {
		if f.ScanCalls > 1 || f.Sampled > 200 || f.BucketReads > 210 || len(f.Tenants) > 5 || f.Watched > 10 {
			t.Errorf("frame %d: %d SCANs, %d sampled, %d reads, %d shown, %d watched: over its bounds", f.Refresh, f.ScanCalls, f.Sampled, f.BucketReads, len(f.Tenants), f.Watched)
		}
	}
	last := fs[2]
	if len(last.Tenants) == 0 || last.Tenants[0].Tenant != "hot" {
		t.Fatalf("last frame ranks %+v first, want hot", last.Tenants)
	}
	g := last.Tenants[0].Granted
	if g == nil || *g < 250 || *g > 750 {
		t.Errorf("hot granted %s/s, want about its rate, 500/s", optFloat(g))
	}
	if n := last.Tenants[0].Instances; n == nil || *n != 1 {
		t.Errorf("hot instances %v, want 1", n)
	}
	for _, tn := range last.Tenants[1:] {
		if tn.Granted != nil && *tn.Granted > 1 {
			t.Errorf("idle tenant %s granted %v/s", tn.Tenant, *tn.Granted)
		}
	}
	// The text view.
	text := c.mustRun("top", "-once", "-n", "3")
	// -n above -watch's default of 50, -watch not given: it follows -n
	// (the command refused a flag the operator never gave).
	c.mustRun("top", "-once", "-n", "100")
	if !strings.Contains(text, "TENANT") || !strings.Contains(text, "GRANTED/S") || strings.Count(text, "\n") != 5 {
		t.Errorf("top -once printed %q, want a header line, a table header and 3 tenants", text)
	}
}

// TestTopCostIsBounded: on a server of its own, the Redis commands of a
// refresh stay within one SCAN and -sample + -watch script calls, with
// 2,000 tenants.
// topTenants is how many buckets TestTopCostIsBounded makes before it
// runs top: its bounds do not depend on it, and README's figure for a
// million tenants is this test's log with -top.tenants=1000000.
var topTenants = flag.Int("top.tenants", 2000, "buckets TestTopCostIsBounded makes before running top")

func TestTopCostIsBounded(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartServer(t)
	rdb := srv.Client()
	defer rdb.Close()
	prefix := "lqtop:"
	lc, err := lease.NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	// The buckets, in pipelines of 5,000 acquires, each emptied: its key
	// expires when it would be full again, 1,000 s on, so that the first
	// are still there when a million have been made.
	reqs := make([]lease.Request, 0, 5000)
	for i := 0; i < *topTenants; i += cap(reqs) {
		reqs = reqs[:0]
		for j := i; j < min(i+cap(reqs), *topTenants); j++ {
			reqs = append(reqs, lease.Request{Tenant: fmt.Sprintf("t%d", j), Limits: lease.Limits{Rate: 0.01, Burst: 10}, Want: 10})
		}
		if _, err := lc.AcquireMany(ctx, reqs, nil); err != nil {
			t.Fatal(err)
		}
	}
	stats := func() (scan, eval int64, cpu time.Duration) {
		info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			if name == "used_cpu_user" || name == "used_cpu_sys" {
				s, _ := strconv.ParseFloat(rest, 64)
				cpu += time.Duration(s * float64(time.Second))
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			switch name {
			case "cmdstat_scan":
				scan += n
			case "cmdstat_evalsha", "cmdstat_eval":
				eval += n
			}
		}
		return
	}
	scan0, eval0, cpu0 := stats()
	const iterations, sample, watch = 4, 50, 20
	began := time.Now()
	out, _, code := runBinary(t, "-redis", srv.URL(), "-prefix", prefix, "-json", "top", "-iterations", strconv.Itoa(iterations),
		"-interval", "10ms", "-n", "5", "-sample", strconv.Itoa(sample), "-watch", strconv.Itoa(watch))
	if code != 0 {
		t.Fatalf("top: exit %d", code)
	}
	took := time.Since(began)
	scan1, eval1, cpu1 := stats()
	keys, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("top over %d buckets (%d keys): %d refreshes (-sample %d -watch %d) sent %d SCANs and %d script calls, %v of Redis CPU (INFO cpu, the INFO calls included), %v from start to exit",
		*topTenants, keys, iterations, sample, watch, scan1-scan0, eval1-eval0, cpu1-cpu0, took.Round(time.Millisecond))
	if got := scan1 - scan0; got < 1 || got > iterations {
		t.Errorf("%d SCANs for %d refreshes, want one each at most", got, iterations)
	}
	// A script call per bucket read, and once, the first refresh's calls
	// again as EVAL after their EVALSHA met NOSCRIPT (a new server).
	if got, most := eval1-eval0, int64(iterations*(sample+watch)+sample); got > most {
		t.Errorf("%d script calls for %d refreshes, want at most %d", got, iterations, most)
	}
	if fs := frames(t, out); len(fs) != iterations || fs[iterations-1].Watched != watch {
		t.Errorf("frames %+v, want %d with %d watched at the end", fs, iterations, watch)
	}
}

// TestQuotaChangeWithoutTheVersion: when the quota version cannot be
// raised after the change (here a key of another type there), quota set
// and quota delete say what they did, then fail saying the version was
// not raised. They printed only the error, and the override was stored
// all the same: the operator read a failure, and a retried delete found
// nothing to delete.
func TestQuotaChangeWithoutTheVersion(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	if err := rdb.HSet(ctx, lease.QuotaVersionKey(c.prefix), "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	out, errs, code := c.run("quota", "set", "-rate", "5", "-burst", "10", "acme")
	if code != 1 || !strings.Contains(out, "acme: quota set: rate 5/s, burst 10") || !strings.Contains(errs, "quota version was not raised") {
		t.Errorf("quota set: exit %d, stdout %q, stderr %q; want 1, what was set, and the version's failure", code, out, errs)
	}
	if o, err := lc.GetOverride(ctx, "acme"); err != nil || o == nil || o.Rate != 5 {
		t.Fatalf("stored override %+v, %v; want the rate of 5", o, err)
	}
	out, errs, code = c.run("quota", "delete", "acme")
	if code != 1 || !strings.Contains(out, "acme: override deleted") || !strings.Contains(errs, "quota version was not raised") {
		t.Errorf("quota delete: exit %d, stdout %q, stderr %q; want 1, the deletion, and the version's failure", code, out, errs)
	}
}

// TestTopExitsOneWhenAReadFails: a bucket top cannot read is reported on
// stderr, the frame goes on without it, and the command ends with exit
// status 1, not 0 ("every bucket was read").
func TestTopExitsOneWhenAReadFails(t *testing.T) {
	ctx := context.Background()
	c, rdb, lc := newCLI(t)
	if _, err := lc.Acquire(ctx, "good", lease.Limits{Rate: 1, Burst: 100}, 20); err != nil {
		t.Fatal(err)
	}
	// A bucket no script writes: its level is not a number.
	bad := lc.Key("bad")
	if err := rdb.HSet(ctx, bad, "tk", "x", "ts", "y").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Expire(ctx, bad, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := c.run("-json", "top", "-once")
	if code != exitFailure {
		t.Errorf("top -once with an unreadable bucket: exit %d, want %d", code, exitFailure)
	}
	if !strings.Contains(stderr, "bad") || !strings.Contains(stderr, "1 bucket reads failed") {
		t.Errorf("stderr %q: want the bucket's error and the count of failed reads", stderr)
	}
	fs := frames(t, out)
	if len(fs) != 1 || len(fs[0].Tenants) != 1 || fs[0].Tenants[0].Tenant != "good" {
		t.Errorf("frames %+v: want one, showing the readable bucket", fs)
	}
}
