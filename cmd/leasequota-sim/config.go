package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// Scenarios the simulator knows, in the order -h lists them.
var scenarios = []string{"steady", "burst", "skew", "churn", "outage", "fleet", "tight"}

var scenarioHelp = map[string]string{
	"steady": "constant skewed demand, traffic spread evenly over the instances",
	"burst":  "every tenant's demand x4 for the middle fifth of the run",
	"skew":   "one instance takes 70% of the traffic; the hot instance changes half-way",
	"churn":  "the last instance stops (Close) at 35% of the run, a new one starts at 55%",
	"outage": "Redis unreachable (connections black-holed) from 40% to 60% of the run",
	"fleet":  "issue #15's fleet shape: every tenant Rate 100, Burst 100, offered 3x its quota evenly over the instances; headline: Redis CPU per admitted request and script runs/s (Redis CPU needs -redis)",
	"tight":  "issue #16's edges: tenants whose burst is 0.1 s of rate (3000/s burst 300, 800/s burst 100, 300/s burst 50) shared by 3 instances, instance 2 in 700 ms on/off phases, and low-rate tenants (20/s, burst 40) over all instances, each offered 3x its quota; adds the account of where every token of Burst + Rate*T went",
}

// Config is what the flags set.
type Config struct {
	Instances int           // simulated service instances, each a Limiter with its own client
	Tenants   int           // tenants shared by all instances
	Duration  time.Duration // length of the simulated workload
	Scenario  string        // one of scenarios
	RedisURL  string        // "" means the embedded Redis (unless RedisCluster)
	// RedisCluster is host:port,... of Redis Cluster nodes; "" for none.
	RedisCluster string
	Report       string        // HTML report path, "" for none
	Baseline     time.Duration // length of the per-request baseline run, 0 to skip it
	Load         float64       // multiplier of every tenant's demand
	Refresh      time.Duration // WithRefreshInterval
	LeaseTTL     time.Duration // WithLeaseTTL
	Reservation  time.Duration // WithReservation; 0 turns reservations off
	Shares       time.Duration // WithRateShares' period (headroom 0); 0 turns rate shares off
	Timeout      time.Duration // WithRedisTimeout; 0 means the default for the Redis in use
	Failure      string        // WithFailureMode: "default", "local", "closed" or "open"
	Workers      int           // request goroutines per instance
	Busy         int           // goroutines that keep the CPUs busy during the workload
	Seed         uint64        // workload and limiter jitter seed
	Progress     bool          // show the live progress line
	Metrics      string        // serve the limiters' metrics on this address, "" for none
}

// DefaultConfig is what the flags default to.
func DefaultConfig() Config {
	return Config{
		Instances: 4,
		Tenants:   50,
		Duration:  10 * time.Second,
		Scenario:  "steady",
		Baseline:  3 * time.Second,
		Load:      1,
		// The library's defaults.
		Refresh:     leasequota.DefaultRefreshInterval,
		LeaseTTL:    leasequota.DefaultLeaseTTL,
		Reservation: leasequota.DefaultReservation,
		Failure:     "default",
		Workers:     2,
		Seed:        1,
		Progress:    true,
	}
}

// Limits of the flags. Tenants is capped so that the per-tenant time
// series stay small (instances x tenants x buckets counters).
const (
	maxInstances = 32
	maxTenants   = 2000
	maxWorkers   = 16
	maxBusy      = 64
	minDuration  = time.Second
	maxDuration  = time.Hour
	maxBaseline  = time.Minute
	maxLoad      = 100
)

// errHelp is returned by parseConfig for -h: usage was printed, exit 0.
var errHelp = flag.ErrHelp

// usageError is a flag error: the message is printed with a hint, exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parseConfig parses and validates the command line. Errors are
// *usageError (or errHelp for -h); nothing is printed but -h's usage.
func parseConfig(args []string, out io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("leasequota-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.Instances, "instances", cfg.Instances, fmt.Sprintf("simulated service `instances`, each a Limiter with its own Redis client (1..%d)", maxInstances))
	fs.IntVar(&cfg.Tenants, "tenants", cfg.Tenants, fmt.Sprintf("`tenants` shared by all instances (1..%d); ~6%% large, ~24%% medium, the rest small", maxTenants))
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, fmt.Sprintf("length of the simulated workload (%v..%v)", minDuration, maxDuration))
	fs.StringVar(&cfg.Scenario, "scenario", cfg.Scenario, "`name` of the scenario: "+strings.Join(scenarios, ", ")+" (see below)")
	fs.StringVar(&cfg.RedisURL, "redis", "", "`URL` of a Redis server, e.g. redis://localhost:6379/0 (default: an embedded in-process Redis, miniredis)")
	fs.StringVar(&cfg.RedisCluster, "redis-cluster", "", "comma-separated host:port `addresses` of Redis Cluster nodes, e.g. localhost:7000,localhost:7001 (each instance gets a cluster client; exclusive with -redis) (default: none)")
	fs.StringVar(&cfg.Report, "report", "", "write a self-contained HTML report with charts to `file` (default: no report)")
	fs.DurationVar(&cfg.Baseline, "baseline", cfg.Baseline, fmt.Sprintf("length of the per-request limiter baseline run, 0 to skip it (at most %v)", maxBaseline))
	fs.Float64Var(&cfg.Load, "load", cfg.Load, fmt.Sprintf("`factor` applied to every tenant's demand (0 < factor <= %d)", maxLoad))
	fs.DurationVar(&cfg.Refresh, "refresh", cfg.Refresh, "the limiters' refresh interval (WithRefreshInterval, >= 1ms)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "the limiters' lease lifetime L (WithLeaseTTL, >= 2 x -refresh)")
	fs.DurationVar(&cfg.Reservation, "reservation", cfg.Reservation, "the limiters' reservation length (WithReservation) (default 0: off, the library's default); the window bound's L grows by it and a second")
	fs.DurationVar(&cfg.Shares, "shares", 0, fmt.Sprintf("the `period` of the limiters' rate shares (WithRateShares, headroom 0: a scarce tenant's instance holds its fair share of the rate and renews it about once a period), %v to %v, exclusive with -reservation (default 0: off, the library's default)", leasequota.MinSharePeriod, leasequota.MaxSharePeriod))
	fs.DurationVar(&cfg.Timeout, "redis-timeout", 0, fmt.Sprintf("deadline of each lease call (WithRedisTimeout) (default: %v on the embedded Redis, which runs scripts slowly; the library's default, half of -refresh, with -redis)", embeddedTimeout))
	fs.StringVar(&cfg.Failure, "failure-mode", cfg.Failure, "what requests get once Redis is unreachable and leases are spent (WithFailureMode): `mode` local, closed, open, or default (the library's)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, fmt.Sprintf("request goroutines per instance (1..%d)", maxWorkers))
	fs.IntVar(&cfg.Busy, "busy", 0, fmt.Sprintf("`goroutines` that spin on the CPU for the whole workload, as request handlers that keep every core busy (0..%d) (default 0: none)", maxBusy))
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "`seed` of the workload (bursty phases) and of the limiters' jitter")
	fs.BoolVar(&cfg.Progress, "progress", cfg.Progress, "show live progress (in place on a terminal, a line a second otherwise)")
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve the limiters' OpenTelemetry metrics in Prometheus format at http://`ADDR`/metrics while the simulation runs, e.g. localhost:9464 (default: off)")
	fs.Usage = func() { printUsage(out, fs) }

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, errHelp // Parse printed the usage
		}
		return cfg, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return cfg, usagef("unexpected argument %q: leasequota-sim takes only flags", fs.Arg(0))
	}
	return cfg, cfg.Validate()
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: leasequota-sim [flags]

Runs simulated service instances, each a leasequota.Limiter with its own
Redis client, sharing tenants with skewed quotas and demand; prints a table
per tenant class, compares with a per-request Redis limiter, and optionally
writes an HTML report. Exit status: 0 when every tenant stayed within
Burst + Rate*elapsed, 1 when one did not (or the run failed), 2 for bad flags.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, "\nScenarios:\n")
	for _, s := range scenarios {
		fmt.Fprintf(w, "  %-7s %s\n", s, scenarioHelp[s])
	}
	fmt.Fprint(w, `
Example: leasequota-sim -scenario outage -report leasequota-report.html
`)
}

// Validate checks every field and names the flag at fault.
func (c Config) Validate() error {
	switch {
	case c.Instances < 1 || c.Instances > maxInstances:
		return usagef("-instances %d: want 1..%d", c.Instances, maxInstances)
	case c.Tenants < 1 || c.Tenants > maxTenants:
		return usagef("-tenants %d: want 1..%d", c.Tenants, maxTenants)
	case c.Duration < minDuration || c.Duration > maxDuration:
		return usagef("-duration %v: want %v..%v", c.Duration, minDuration, maxDuration)
	case c.Baseline < 0 || c.Baseline > maxBaseline:
		return usagef("-baseline %v: want 0 (skip) .. %v", c.Baseline, maxBaseline)
	case math.IsNaN(c.Load) || c.Load <= 0 || c.Load > maxLoad:
		return usagef("-load %v: want a factor > 0 and <= %d", c.Load, maxLoad)
	case c.Refresh < time.Millisecond || c.Refresh > 10*time.Second:
		return usagef("-refresh %v: want 1ms..10s", c.Refresh)
	case c.Reservation < 0 || c.Reservation > leasequota.MaxReservation:
		return usagef("-reservation %v: want 0 to %v", c.Reservation, leasequota.MaxReservation)
	case c.Shares != 0 && (c.Shares < leasequota.MinSharePeriod || c.Shares > leasequota.MaxSharePeriod):
		return usagef("-shares %v: want 0 (off) or %v to %v", c.Shares, leasequota.MinSharePeriod, leasequota.MaxSharePeriod)
	case c.Shares > 0 && c.Reservation > 0:
		return usagef("-shares and -reservation: rate shares replace reservations, give one")
	case c.LeaseTTL < quota.MinLeaseTTL(c.Refresh) || c.LeaseTTL > time.Hour:
		return usagef("-lease-ttl %v: want >= twice -refresh (%v) and <= 1h", c.LeaseTTL, quota.MinLeaseTTL(c.Refresh))
	case c.Timeout < 0 || c.Timeout > time.Minute:
		return usagef("-redis-timeout %v: want > 0 and <= 1m (or 0 for the default)", c.Timeout)
	case c.Workers < 1 || c.Workers > maxWorkers:
		return usagef("-workers %d: want 1..%d", c.Workers, maxWorkers)
	case c.Busy < 0 || c.Busy > maxBusy:
		return usagef("-busy %d: want 0..%d", c.Busy, maxBusy)
	}
	if _, ok := failureModes[c.Failure]; !ok {
		return usagef("-failure-mode %q: want default, local, closed or open", c.Failure)
	}
	known := false
	for _, s := range scenarios {
		known = known || s == c.Scenario
	}
	if !known {
		return usagef("-scenario %q: want one of %s", c.Scenario, strings.Join(scenarios, ", "))
	}
	if (c.Scenario == "skew" || c.Scenario == "churn") && c.Instances < 2 {
		return usagef("-scenario %s needs -instances >= 2, got %d", c.Scenario, c.Instances)
	}
	if c.Scenario == "tight" && (c.Instances < tightInstances || c.Tenants < len(tightTiers)) {
		return usagef("-scenario tight needs -instances >= %d and -tenants >= %d, got %d and %d", tightInstances, len(tightTiers), c.Instances, c.Tenants)
	}
	if c.RedisCluster != "" {
		if c.RedisURL != "" {
			return usagef("-redis and -redis-cluster: give one of them")
		}
		if c.Scenario == "outage" {
			return usagef("-scenario outage runs on the embedded Redis or -redis (it puts a proxy in front of one server), not -redis-cluster")
		}
		for _, a := range c.clusterAddrs() {
			if _, _, err := net.SplitHostPort(a); err != nil || a == "" {
				return usagef("-redis-cluster %q: %q is not host:port", c.RedisCluster, a)
			}
		}
	}
	if c.Metrics != "" {
		_, port, err := net.SplitHostPort(c.Metrics)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return usagef("-metrics %q: %v (want host:port, e.g. localhost:9464)", c.Metrics, err)
		}
	}
	if c.RedisURL != "" {
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			return usagef("-redis %q: %v (want e.g. redis://localhost:6379/0)", c.RedisURL, err)
		}
	}
	if c.Report != "" {
		dir := filepath.Dir(c.Report)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return usagef("-report %q: directory %q does not exist", c.Report, dir)
		}
		if st, err := os.Stat(c.Report); err == nil && st.IsDir() {
			return usagef("-report %q: is a directory, want a file name", c.Report)
		}
	}
	return nil
}

// failureModes maps -failure-mode to the library's modes; "default"
// passes no option.
var failureModes = map[string]leasequota.FailureMode{
	"default": leasequota.FailDefault,
	"local":   leasequota.FailLocal,
	"closed":  leasequota.FailClosed,
	"open":    leasequota.FailOpen,
}

// embeddedTimeout is the lease call deadline on the embedded Redis: it
// starts a Lua interpreter for every script call (~0.2 ms), so a pipeline
// of 50 lease calls takes ~8 ms, several instances' pipelines (or 200
// cold-start calls at once) queue behind each other, and the server shares
// the 2 cores with everything else; with the library's 50 ms (or 100 ms)
// calls time out now and then on a busy machine, and a failed call sends
// its tenants to the failure mode. The price: in the outage scenario the
// failure mode engages that much later.
const embeddedTimeout = 250 * time.Millisecond

// redisTimeout is the lease call deadline the limiters get.
// windowL is the L of the window bound: the lease lifetime, plus, with
// reservations, their length and lease.ReserveAhead.
func (c Config) windowL() time.Duration {
	if c.Reservation > 0 {
		return c.LeaseTTL + c.Reservation + lease.ReserveAhead
	}
	return c.LeaseTTL
}

func (c Config) redisTimeout() time.Duration {
	switch {
	case c.Timeout > 0:
		return c.Timeout
	case c.embedded():
		return embeddedTimeout
	}
	return max(c.Refresh/2, 10*time.Millisecond) // the library's default
}

// clusterAddrs splits -redis-cluster.
func (c Config) clusterAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.RedisCluster, ",") {
		out = append(out, strings.TrimSpace(a))
	}
	return out
}

// embedded reports whether the simulation runs on the in-process Redis.
func (c Config) embedded() bool { return c.RedisURL == "" && c.RedisCluster == "" }

// redisLabel describes where Redis is, without credentials.
func (c Config) redisLabel() string {
	if c.RedisCluster != "" {
		return "cluster " + strings.Join(c.clusterAddrs(), ",")
	}
	if c.RedisURL == "" {
		return "embedded (miniredis, in-process)"
	}
	opt, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%s db %d", opt.Addr, opt.DB)
}
