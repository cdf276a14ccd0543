package main

// quota set, get, delete and list.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// quotaJSON is a quota in JSON output.
type quotaJSON struct {
	Rate        float64 `json:"rate"`
	Burst       int64   `json:"burst"`
	MinLease    int64   `json:"min_lease"`
	MaxLease    int64   `json:"max_lease"`
	LeaseTTL    string  `json:"lease_ttl"`
	FailureMode string  `json:"failure_mode"`
}

func toJSON(q quota.Quota) *quotaJSON {
	return &quotaJSON{
		Rate: q.Rate, Burst: q.Burst, MinLease: q.MinLease, MaxLease: q.MaxLease,
		LeaseTTL: q.LeaseTTL.String(), FailureMode: q.FailureMode.String(),
	}
}

// describe writes q on one line; zero fields are the services' defaults.
func describe(q quota.Quota) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rate %s/s, burst %d", formatFloat(q.Rate), q.Burst)
	if q.MinLease != 0 {
		fmt.Fprintf(&b, ", min lease %d", q.MinLease)
	}
	if q.MaxLease != 0 {
		fmt.Fprintf(&b, ", max lease %d", q.MaxLease)
	}
	if q.LeaseTTL != 0 {
		fmt.Fprintf(&b, ", lease TTL %v", q.LeaseTTL)
	}
	if q.FailureMode != quota.FailDefault {
		fmt.Fprintf(&b, ", failure mode %v", q.FailureMode)
	}
	return b.String()
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// failureModes are the -failure-mode values.
var failureModes = map[string]quota.FailureMode{
	"default": quota.FailDefault, "fail_local": quota.FailLocal,
	"fail_closed": quota.FailClosed, "fail_open": quota.FailOpen,
}

func writeJSON(e *env, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err // "json: ...": encoding/json names itself
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", b)
	return err
}

func quotaSet(ctx context.Context, e *env, args []string) (ret error) {
	fs := newFlags(e, "quota set", "quota set -rate R -burst B [-lease-ttl D] [-min-lease N] [-max-lease N] [-failure-mode M] (TENANT | -empty-tenant)")
	rate := fs.String("rate", "", "tokens per second added to the tenant's bucket (required; finite, > 0)")
	burst := fs.String("burst", "", "the bucket's capacity in tokens (required; an integer >= 1)")
	ttl := fs.Duration("lease-ttl", 0, "how long an instance may hold leased tokens (0: each service's default; a service raises one below twice its refresh interval to that)")
	minLease := fs.Int64("min-lease", 0, "smallest lease an instance asks for (0: 1)")
	maxLease := fs.Int64("max-lease", 0, "largest lease an instance holds (0: burst/2)")
	mode := fs.String("failure-mode", "default", "what requests get while Redis is unreachable: default (each service's), fail_local, fail_closed or fail_open")
	empty := emptyTenantFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The arguments first: flags after the tenant are left unparsed, and
	// checked after the flags' values, a command line that gave -rate was
	// told "-rate is required".
	tenant, err := tenantArg(fs, *empty)
	if err != nil {
		return err
	}
	var q quota.Quota
	if *rate == "" {
		return usagef("quota set: -rate is required")
	}
	r, err := strconv.ParseFloat(*rate, 64)
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 || r > lease.MaxRate {
		return usagef("quota set: -rate %.40q: want a finite number > 0 and <= %g", *rate, float64(lease.MaxRate))
	}
	q.Rate = r
	if *burst == "" {
		return usagef("quota set: -burst is required")
	}
	b, err := strconv.ParseInt(*burst, 10, 64)
	if err != nil || b < 1 || b > lease.MaxBurst {
		return usagef("quota set: -burst %.40q: want an integer from 1 to %d", *burst, int64(lease.MaxBurst))
	}
	q.Burst = b
	m, ok := failureModes[*mode]
	if !ok {
		return usagef("quota set: -failure-mode %.40q: want default, fail_local, fail_closed or fail_open", *mode)
	}
	q.MinLease, q.MaxLease, q.LeaseTTL, q.FailureMode = *minLease, *maxLease, *ttl, m
	// The rules a service's SetQuota applies (all but the LeaseTTL floor,
	// which depends on each service's refresh interval).
	if err := q.Validate(); err != nil {
		return usagef("quota set: %s", flagNames(strings.TrimPrefix(err.Error(), "leasequota: invalid quota: ")))
	}
	cctx, cancel := e.call(ctx)
	defer cancel()
	res, err := e.client.AdminSetOverride(cctx, tenant, quota.ToOverride(q))
	if err != nil && !errors.Is(err, lease.ErrQuotaVersion) {
		return tenantErr("quota set", tenant, err)
	}
	// The override is stored even when the version was not raised: say
	// what was done, then fail with why (unreported, the command looked
	// failed and a retried delete found nothing to delete).
	defer func() {
		if err != nil && ret == nil {
			ret = tenantErr("quota set", tenant, err)
		}
	}()
	if e.json {
		out := struct {
			Tenant       string     `json:"tenant"`
			Quota        *quotaJSON `json:"quota"`
			HadOverride  bool       `json:"had_override"`
			BucketTokens *float64   `json:"bucket_tokens"`
		}{Tenant: tenant, Quota: toJSON(q), HadOverride: res.Had}
		if res.Stored {
			out.BucketTokens = &res.Tokens
		}
		return writeJSON(e, out)
	}
	fmt.Fprintf(e.stdout, "%s: quota set: %s", printable(tenant), describe(q))
	if res.Stored {
		fmt.Fprintf(e.stdout, " (bucket now %s tokens)", formatFloat(res.Tokens))
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// flagNames turns the Quota field names in a validation message into the
// flags that set them.
func flagNames(msg string) string {
	return strings.NewReplacer("MinLease", "-min-lease", "MaxLease", "-max-lease", "LeaseTTL", "-lease-ttl",
		"FailureMode", "-failure-mode", "Rate", "-rate", "Burst", "-burst").Replace(msg)
}

// tenantCall parses the flags of a subcommand that takes none but its one
// TENANT argument, and returns the tenant and the context of its Redis
// call, which cancel ends.
func tenantCall(ctx context.Context, e *env, name, usage string, args []string) (string, context.Context, context.CancelFunc, error) {
	fs := newFlags(e, name, usage)
	empty := emptyTenantFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return "", nil, nil, err
	}
	tenant, err := tenantArg(fs, *empty)
	if err != nil {
		return "", nil, nil, err
	}
	cctx, cancel := e.call(ctx)
	return tenant, cctx, cancel, nil
}

func quotaGet(ctx context.Context, e *env, args []string) error {
	tenant, cctx, cancel, err := tenantCall(ctx, e, "quota get", "quota get (TENANT | -empty-tenant)", args)
	if err != nil {
		return err
	}
	defer cancel()
	o, err := e.client.GetOverride(cctx, tenant)
	if err != nil {
		return tenantErr("quota get", tenant, err)
	}
	if e.json {
		out := struct {
			Tenant string     `json:"tenant"`
			Quota  *quotaJSON `json:"quota"`
		}{Tenant: tenant}
		if o != nil {
			out.Quota = toJSON(quota.FromOverride(*o))
		}
		return writeJSON(e, out)
	}
	if o == nil {
		fmt.Fprintf(e.stdout, "%s: no override (the services' quota applies)\n", printable(tenant))
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", printable(tenant), describe(quota.FromOverride(*o)))
	return nil
}

func quotaDelete(ctx context.Context, e *env, args []string) (ret error) {
	tenant, cctx, cancel, err := tenantCall(ctx, e, "quota delete", "quota delete (TENANT | -empty-tenant)", args)
	if err != nil {
		return err
	}
	defer cancel()
	res, err := e.client.AdminDeleteOverride(cctx, tenant)
	if err != nil && !errors.Is(err, lease.ErrQuotaVersion) {
		return tenantErr("quota delete", tenant, err)
	}
	defer func() { // as in quota set
		if err != nil && ret == nil {
			ret = tenantErr("quota delete", tenant, err)
		}
	}()
	if e.json {
		return writeJSON(e, struct {
			Tenant  string `json:"tenant"`
			Deleted bool   `json:"deleted"`
		}{tenant, res.Had})
	}
	if !res.Had {
		fmt.Fprintf(e.stdout, "%s: no override to delete\n", printable(tenant))
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: override deleted (the services' quota applies from their next lease call)\n", printable(tenant))
	return nil
}

// errListing is wrapped by the error quota list returns when some
// overrides could not be listed (each was reported on stderr).
var errListing = errors.New("some overrides could not be listed")

func quotaList(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "quota list", "quota list")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	// The listing makes a call per page: each has the client's timeouts
	// (-timeout), and ctx (an interrupt) ends it between pages.
	cctx := ctx
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !e.json {
		fmt.Fprintln(tw, "TENANT\tRATE/S\tBURST\tMIN LEASE\tMAX LEASE\tLEASE TTL\tFAILURE MODE")
	}
	seen := map[string]bool{}
	bad := 0
	for lo, err := range e.client.ListOverrides(cctx) {
		if err != nil && lo.Key == "" {
			tw.Flush()
			return fmt.Errorf("quota list: %w", err)
		}
		// Before the unreadable overrides' branch, so that each of those
		// is reported and counted once too.
		if seen[lo.Key] {
			continue // SCAN may return a key twice
		}
		seen[lo.Key] = true
		if err != nil && !errors.Is(err, lease.ErrNameUnknown) {
			fmt.Fprintf(e.stderr, "leasequota: quota list: %s\n", stripPrefix(err.Error()))
			bad++
			continue
		}
		q := quota.FromOverride(lo.Override)
		named := err == nil
		if e.json {
			out := struct {
				Tenant *string    `json:"tenant"`
				Key    string     `json:"key"`
				Quota  *quotaJSON `json:"quota"`
			}{Key: lo.Key, Quota: toJSON(q)}
			if named {
				out.Tenant = &lo.Tenant
			}
			if err := writeJSON(e, out); err != nil {
				return err
			}
			continue
		}
		name := printable(lo.Tenant)
		if !named {
			name = "(unnamed) " + printableKey(lo.Key)
		}
		// A zero lease field is each service's default (as quota get
		// leaves it out): "0" read as a MAX LEASE of none.
		ttl := "default"
		if q.LeaseTTL != 0 {
			ttl = q.LeaseTTL.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%v\n", name, formatFloat(q.Rate), q.Burst, leaseSize(q.MinLease), leaseSize(q.MaxLease), ttl, q.FailureMode)
	}
	tw.Flush()
	if bad > 0 {
		return fmt.Errorf("quota list: %w: %d", errListing, bad)
	}
	return nil
}

// leaseSize is a MIN LEASE or MAX LEASE of quota list: "default" for 0.
func leaseSize(n int64) string {
	if n == 0 {
		return "default"
	}
	return strconv.FormatInt(n, 10)
}

// printable quotes a tenant name that a table or a terminal would garble
// (spaces, control or non-UTF-8 bytes: escape sequences went to the
// terminal as they were from quota set, get and delete), and cuts one
// over 64 bytes. Control characters include C1's (U+0080..U+009F, the
// CSI U+009B among them), which strconv.CanBackquote passes, and every
// other character strconv.Quote escapes. The empty name is quoted, so
// that it shows.
func printable(s string) string {
	if plain(s) && len(s) <= 64 {
		return s
	}
	if len(s) > 64 {
		// Cut at 64 bytes, before a character that would straddle the
		// cut (bytes that are not UTF-8 are quoted one by one). fmt's
		// %.64q counts characters: a 70-byte name of 35 was printed
		// whole, as if cut.
		cut := 64
		for i := cut - 1; i > cut-utf8.UTFMax; i-- {
			if utf8.RuneStart(s[i]) {
				if r, size := utf8.DecodeRuneInString(s[i:]); (r != utf8.RuneError || size > 1) && i+size > cut {
					cut = i
				}
				break
			}
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

// plain reports whether s prints as it is: not empty, and no space,
// control or non-UTF-8 byte (see printable).
func plain(s string) bool {
	return s != "" && strconv.CanBackquote(s) && !strings.ContainsFunc(s, func(r rune) bool { return r == ' ' || !strconv.IsPrint(r) })
}

// printableKey quotes a Redis key as printable quotes a name, and never
// cuts it: a key is what an operator gives redis-cli, and where one is
// shown it is the tenant's only name (a hashed key without a stored
// name) or the way to its keys (inspect). Cut at 64 bytes like a name,
// a hashed key (the prefix, "{h:" and 64 hex digits) lost part of its
// hash. A key is at most a few hundred bytes (lease.MaxPrefixLen, and a
// tenant of at most 128 bytes percent-encoded).
func printableKey(key string) string {
	if plain(key) {
		return key
	}
	return strconv.Quote(key)
}
