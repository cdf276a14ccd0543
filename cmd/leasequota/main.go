// Command leasequota is the operator's command of leasequota: it sets,
// reads, deletes and lists tenants' quota overrides, inspects a tenant's
// global bucket and shows the busiest tenants, against the Redis (a server
// or a Redis Cluster) that the services share. It needs no configuration
// of the services: it writes through package lease's admin calls, which do
// not need the services' default quota.
//
// Usage:
//
//	leasequota [global flags] quota set -rate R -burst B [-lease-ttl D] [-min-lease N] [-max-lease N] [-failure-mode M] (TENANT | -empty-tenant)
//	leasequota [global flags] quota get (TENANT | -empty-tenant)
//	leasequota [global flags] quota delete (TENANT | -empty-tenant)
//	leasequota [global flags] quota list
//	leasequota [global flags] inspect (TENANT | -empty-tenant)
//	leasequota [global flags] top [-interval D] [-n N] [-sample K] [-watch W] [-iterations N | -once]
//
// Global flags: -redis URL (default redis://localhost:6379/0),
// -redis-cluster host:port,... (a Redis Cluster instead; the password, if
// any, in the environment variable LEASEQUOTA_REDIS_PASSWORD), -prefix P
// (the services' key prefix, default "leasequota:"), -json (JSON output;
// a subcommand takes it after its name too), -timeout D (each Redis
// call's deadline, default 5s).
//
// TENANT is any non-empty name of up to 1024 bytes. An empty argument
// (an unset shell variable: quota get "$TENANT") is refused as bad usage.
// The library takes the empty name as a tenant like any other, and top
// lists it, printed "": the flag -empty-tenant, given instead of TENANT,
// names it (quota get -empty-tenant).
//
// Exit status: 0 on success, 1 on a failure (Redis unreachable, an error
// reply, a bucket top could not read), 2 for bad usage (an unknown subcommand or flag, a bad value: the
// message names it, and nothing is written). An interrupt (Ctrl-C) is how
// an operator ends top: it ends top with the status of a top whose
// refreshes are done (0, or 1 when a bucket could not be read), whether
// it lands during a refresh or between two, with -iterations N as
// without. Any other subcommand's Redis call it ends is a failure (1).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// maxTenant is the longest tenant name the command accepts, in bytes. The
// library takes any byte string (a name over 128 bytes is hashed into its
// key); a longer argument is taken for a mistake (a file pasted in).
const maxTenant = 1024

// errUsage is wrapped by every error about the command line: exit status 2.
var errUsage = errors.New("usage")

// errEmptyTenant is wrapped (with errUsage) by the error about an empty
// TENANT argument. The library takes "" as a tenant, but an empty
// argument is far more often a shell variable left unset (quota get
// "$TENANT") than that tenant: acting on it read, capped or uncapped
// another tenant than the one meant. -empty-tenant names it.
var errEmptyTenant = errors.New("TENANT is empty (an unset variable?); -empty-tenant, with no TENANT, names the empty tenant")

// usagef returns an error about the command line.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

func main() {
	// The errors reach the operator through the exit message; go-redis's
	// own log of each failed dial would repeat them.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quietLogger discards go-redis's internal log.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// env is what every subcommand gets: the global flags' results.
type env struct {
	client  *lease.Client
	json    bool
	timeout time.Duration
	stdout  io.Writer
	stderr  io.Writer
}

// call returns a context for one Redis call.
func (e *env) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.timeout)
}

const globalUsage = `usage: leasequota [global flags] <command> [flags] [TENANT]

Commands:
  quota set -rate R -burst B [-lease-ttl D] [-min-lease N] [-max-lease N] [-failure-mode M] TENANT
                   store TENANT's quota override (every instance applies it
                   within about half a refresh interval plus two rounds)
  quota get TENANT     print TENANT's override, if any
  quota delete TENANT  remove TENANT's override (the services' quota applies again)
  quota list           every stored override (SCAN on every node)
  inspect TENANT       TENANT's global bucket now, its override, its instances
  top                  the busiest tenants, refreshed (see leasequota top -help)

TENANT may not be empty; -empty-tenant in its place names the tenant "".

Global flags (before the command):
`

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leasequota", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", "redis://localhost:6379/0", "Redis `URL` of a server (redis:// or rediss://, with user, password and db)")
	cluster := fs.String("redis-cluster", "", "a Redis Cluster instead: seed nodes `host:port,...` (password from $LEASEQUOTA_REDIS_PASSWORD)")
	prefix := fs.String("prefix", leasequota.DefaultKeyPrefix, "the services' key `prefix` (WithKeyPrefix)")
	jsonOut := fs.Bool("json", false, "machine-readable output: JSON (one object per line for list and top)")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of each Redis call")
	fs.Usage = func() {
		fmt.Fprint(stderr, globalUsage)
		fs.PrintDefaults()
		fmt.Fprint(stderr, "\nExit status: 0 success, 1 failure, 2 bad usage.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *timeout <= 0 {
		return report(stderr, usagef("-timeout %v: want > 0", *timeout))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return exitUsage
	}
	// The command is checked before any connection is made.
	cmd, err := lookup(rest)
	if err != nil {
		return report(stderr, err)
	}
	if err := lease.ValidatePrefix(*prefix); err != nil {
		return report(stderr, usagef("-prefix: %v", strings.TrimPrefix(err.Error(), "lease: ")))
	}
	rdb, err := connect(*redisURL, *cluster, *timeout)
	if err != nil {
		return report(stderr, err)
	}
	defer rdb.Close()
	client, err := lease.NewClient(rdb, *prefix)
	if err != nil {
		return report(stderr, usagef("%v", err))
	}
	e := &env{client: client, json: *jsonOut, timeout: *timeout, stdout: stdout, stderr: stderr}
	return report(stderr, cmd.run(ctx, e, cmd.args))
}

// command is a subcommand and its arguments.
type command struct {
	name string
	args []string
	run  func(ctx context.Context, e *env, args []string) error
}

// lookup finds the subcommand that args name.
func lookup(args []string) (command, error) {
	switch args[0] {
	case "quota":
		if len(args) < 2 {
			return command{}, usagef("quota: want a subcommand: set, get, delete or list")
		}
		sub := map[string]func(context.Context, *env, []string) error{
			"set": quotaSet, "get": quotaGet, "delete": quotaDelete, "list": quotaList,
		}[args[1]]
		if sub == nil {
			return command{}, usagef("quota: unknown subcommand %.40q: want set, get, delete or list", args[1])
		}
		return command{name: "quota " + args[1], args: args[2:], run: sub}, nil
	case "inspect":
		return command{name: "inspect", args: args[1:], run: inspectCmd}, nil
	case "top":
		return command{name: "top", args: args[1:], run: topCmd}, nil
	}
	return command{}, usagef("unknown command %.40q: want quota, inspect or top", args[0])
}

// connect makes the go-redis client: a cluster client when nodes are
// given, else a client of the server at url.
// Every socket read and write has the deadline timeout.
func connect(url, nodes string, timeout time.Duration) (redis.UniversalClient, error) {
	if nodes != "" {
		var addrs []string
		for _, a := range strings.Split(nodes, ",") {
			a = strings.TrimSpace(a)
			if a == "" || !strings.Contains(a, ":") {
				return nil, usagef("-redis-cluster: %.60q is not host:port", a)
			}
			addrs = append(addrs, a)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 addrs,
			Password:              os.Getenv("LEASEQUOTA_REDIS_PASSWORD"),
			ContextTimeoutEnabled: true,
			DialTimeout:           timeout,
			ReadTimeout:           timeout,
			WriteTimeout:          timeout,
		}), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, usagef("-redis: %v", err)
	}
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
	return redis.NewClient(opts), nil
}

// report prints err, if any, and returns the exit status it calls for.
func report(stderr io.Writer, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "leasequota: %s\n", strings.TrimPrefix(err.Error(), "usage: "))
		return exitUsage
	}
	msg := stripPrefix(err.Error())
	var te *tenantError
	if errors.As(err, &te) && te == err {
		// The prefixes go from the library's message alone: the tenant's
		// name is printed as it was given, "x: lease: y" not "x: y".
		msg = te.what() + stripPrefix(te.err.Error())
	}
	fmt.Fprintf(stderr, "leasequota: %s\n", msg)
	return exitFailure
}

// tenantError is the error of a command's call about one tenant.
type tenantError struct {
	cmd    string // the command, "quota set"
	tenant string
	err    error
}

// tenantErr returns err, which cmd's call about tenant returned, named
// with both.
func tenantErr(cmd, tenant string, err error) error {
	return &tenantError{cmd: cmd, tenant: tenant, err: err}
}

// what is the start of the message: the command and the tenant (cut at
// 64 characters).
func (e *tenantError) what() string { return fmt.Sprintf("%s %.64q: ", e.cmd, e.tenant) }

func (e *tenantError) Error() string { return e.what() + e.err.Error() }

func (e *tenantError) Unwrap() error { return e.err }

// stripPrefix drops the library's package prefixes from a message, so
// that it carries the command's one.
func stripPrefix(msg string) string {
	for _, p := range []string{"leasequota: ", "lease: "} {
		msg = strings.TrimPrefix(msg, p)
		msg = strings.ReplaceAll(msg, ": "+p, ": ")
	}
	return msg
}

// newFlags returns the flag set of a subcommand.
//
// Every subcommand also takes -json, the global flag's twin: an operator
// who writes `leasequota top -json` means what `leasequota -json top`
// says, and the flag package would otherwise refuse it.
func newFlags(e *env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.BoolVar(&e.json, "json", e.json, "machine-readable output: JSON (as the global -json)")
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: leasequota %s\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses a subcommand's flags: a flag error is a usage error
// (the flag package has printed it), -help is not an error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

// emptyTenantFlag defines -empty-tenant on the flags of a subcommand
// that takes a TENANT: the one spelling of the empty tenant.
func emptyTenantFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("empty-tenant", false, `the tenant is "" (the empty name; give no TENANT)`)
}

// tenantArg returns the one TENANT argument left after the flags, or ""
// when empty (-empty-tenant) was given and no argument is left.
func tenantArg(fs *flag.FlagSet, empty bool) (string, error) {
	if empty {
		// "" is a tenant as any other to the library (its key is {t:},
		// and top lists it): without this flag it was out of reach.
		if fs.NArg() > 0 {
			return "", usagef("%s: -empty-tenant names the tenant: want no TENANT, got %.40q", fs.Name(), fs.Arg(0))
		}
		return "", nil
	}
	switch fs.NArg() {
	case 0:
		return "", usagef("%s: want a TENANT after the flags (or -empty-tenant)", fs.Name())
	case 1:
	default:
		return "", usagef("%s: want one TENANT after the flags, got %d arguments (flags go before the tenant)", fs.Name(), fs.NArg())
	}
	t := fs.Arg(0)
	if t == "" {
		return "", fmt.Errorf("%w: %s: %w", errUsage, fs.Name(), errEmptyTenant)
	}
	if len(t) > maxTenant {
		return "", usagef("%s: TENANT is %d bytes, the limit is %d", fs.Name(), len(t), maxTenant)
	}
	return t, nil
}

// noArgs checks that no argument is left after the flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("%s: takes no arguments, got %.40q", fs.Name(), fs.Arg(0))
	}
	return nil
}
