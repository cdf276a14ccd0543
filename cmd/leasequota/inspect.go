package main

// inspect TENANT: the tenant's global bucket as Redis holds it now.

import (
	"context"
	"fmt"
	"math"
	"text/tabwriter"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// inspectJSON is inspect's JSON output. Times are Redis TIME in
// microseconds since the Unix epoch.
type inspectJSON struct {
	Tenant   string     `json:"tenant"`
	Key      string     `json:"key"`
	Now      int64      `json:"now_us"`
	Exists   bool       `json:"exists"`
	Level    levelJSON  `json:"level"`
	Stored   *storedJS  `json:"stored"`
	Override *quotaJSON `json:"override"`
	Registry *struct {
		At         int64   `json:"at_us"`
		Instances  int     `json:"instances"`
		Demand     float64 `json:"demand_per_s"`
		WaterLevel float64 `json:"water_level_per_s"`
	} `json:"registry"`
	Instances []instanceJSON `json:"instances"`
	History   []historyJSON  `json:"history"`
	Releases  int64          `json:"releases_remembered"`
	Shares    *sharesJSON    `json:"shares"` // null when none is in force
}

type levelJSON struct {
	Tokens *float64 `json:"tokens"` // null when unknown
	Full   bool     `json:"full"`
	Rate   *float64 `json:"rate"`  // null when unknown
	Burst  *int64   `json:"burst"` // null when unknown
	Source string   `json:"source"`
}

type storedJS struct {
	Tokens  float64 `json:"tokens"`
	Updated int64   `json:"updated_us"`
	Burst   int64   `json:"burst"`
	TTLms   int64   `json:"ttl_ms"` // -1: no expiry; 9223372036854: that or more
}

type instanceJSON struct {
	ID          string         `json:"id"`
	LastAcquire int64          `json:"last_acquire_us"`
	Demand      *float64       `json:"demand_per_s"`   // null when not a finite number (see finite)
	Credit      *float64       `json:"credit"`         // as Demand
	Shares      bool           `json:"honours_shares"` // written by a client that honours rate shares
	RateShare   *rateShareJSON `json:"rate_share"`     // the share it was granted last, null for none
}

// rateShareJSON is an instance's rate share (lease.RateShare).
type rateShareJSON struct {
	Rate    float64 `json:"rate_per_s"`
	FromUs  int64   `json:"from_us"`
	UntilUs int64   `json:"until_us"`
	InForce bool    `json:"in_force"` // the bucket's record still holds it
}

// sharesJSON is the rate shares a bucket records in force (lease.Shares).
type sharesJSON struct {
	Epoch     int64   `json:"epoch"`
	Committed float64 `json:"committed_per_s"`
	Booked    float64 `json:"booked_per_s"`
	PeriodUs  int64   `json:"period_us"`
	PhaseUs   int64   `json:"phase_us"`
}

type historyJSON struct {
	At    int64   `json:"at_us"`
	Level float64 `json:"level"`
}

// levelSource says where a Level's rate comes from.
func levelSource(lv lease.Level) string {
	switch {
	case lv.Exact:
		return "override"
	case lv.Rate > 0:
		return "ttl_estimate"
	}
	return "unknown"
}

func inspectCmd(ctx context.Context, e *env, args []string) error {
	tenant, cctx, cancel, err := tenantCall(ctx, e, "inspect", "inspect (TENANT | -empty-tenant)", args)
	if err != nil {
		return err
	}
	defer cancel()
	in, err := e.client.Inspect(cctx, tenant)
	if err != nil {
		return tenantErr("inspect", tenant, err)
	}
	lv := in.Level()
	if e.json {
		return writeJSON(e, toInspectJSON(in, lv))
	}
	printInspection(e, in, lv)
	return nil
}

func toInspectJSON(in lease.Inspection, lv lease.Level) inspectJSON {
	out := inspectJSON{Tenant: in.Tenant, Key: in.Key, Now: in.Now, Exists: in.Exists, Releases: in.Releases,
		Instances: []instanceJSON{}, History: []historyJSON{}}
	out.Level = levelJSON{Full: lv.Full, Source: levelSource(lv)}
	if lv.Known {
		out.Level.Tokens = &lv.Tokens
	}
	if lv.Rate > 0 {
		out.Level.Rate = &lv.Rate
	}
	if lv.Burst > 0 {
		out.Level.Burst = &lv.Burst
	}
	if in.Exists {
		out.Stored = &storedJS{Tokens: in.Tokens, Updated: in.Updated, Burst: in.Burst, TTLms: in.TTL.Milliseconds()}
		if in.TTL < 0 {
			out.Stored.TTLms = -1
		}
	}
	if in.Override != nil {
		out.Override = toJSON(quota.FromOverride(*in.Override))
	}
	if r := in.Registry; r != nil {
		out.Registry = &struct {
			At         int64   `json:"at_us"`
			Instances  int     `json:"instances"`
			Demand     float64 `json:"demand_per_s"`
			WaterLevel float64 `json:"water_level_per_s"`
		}{r.At, r.Instances, r.Demand, r.WaterLevel}
	}
	for _, i := range in.Instances {
		j := instanceJSON{ID: i.ID, LastAcquire: i.LastAcquire, Demand: finite(i.Demand), Credit: finite(i.Credit), Shares: i.Shares}
		if r := i.RateShare; r.Held() {
			j.RateShare = &rateShareJSON{r.Rate, r.From.UnixMicro(), r.Until.UnixMicro(), in.Shares.Holds(r, time.UnixMicro(in.Now))}
		}
		out.Instances = append(out.Instances, j)
	}
	for _, h := range in.History {
		out.History = append(out.History, historyJSON(h))
	}
	if sh := in.Shares; sh.InForce() {
		out.Shares = &sharesJSON{sh.Epoch, sh.Committed, sh.Booked, sh.Period, sh.Phase}
	}
	return out
}

// finite returns &f, or nil when f is NaN or infinite: a registry entry
// holds what its instance wrote, and one that is not a finite number
// (acquire.lua's read_entry takes such an entry for none) would make
// encoding/json refuse the whole output.
func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// unknownWhy says why the level of a bucket without an override is not
// known (lease.BucketState.Level): it said "no TTL to tell the rate" of
// every such bucket, those with a TTL too (one too near full for the TTL
// to tell the rate, or with rate shares in force).
func unknownWhy(in lease.Inspection) string {
	switch {
	case in.Burst <= 0:
		return "no override, and no burst stored with the bucket"
	case in.Shares.InForce():
		return "no override, and rate shares in force (the key's TTL counts from their end)"
	case in.TTL < 0:
		return "no override, and no TTL to tell the rate"
	case in.TTL == math.MaxInt64:
		// Saturated (lease.Inspection.TTL): longer than a Duration holds.
		return "no override, and the key's TTL does not tell the rate (too long to read)"
	}
	return "no override, and the bucket too near full for its TTL to tell the rate"
}

// ago writes the time between the Redis times at and now.
func ago(at, now int64) string {
	d := time.Duration(now-at) * time.Microsecond
	if d < 0 {
		return (-d).Round(time.Millisecond).String() + " ahead"
	}
	return d.Round(time.Millisecond).String() + " ago"
}

func printInspection(e *env, in lease.Inspection, lv lease.Level) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "tenant\t%s\n", printable(in.Tenant))
	fmt.Fprintf(w, "key\t%s\n", printableKey(in.Key))
	fmt.Fprintf(w, "redis time\t%s\n", time.UnixMicro(in.Now).UTC().Format(time.RFC3339Nano))
	switch {
	case lv.Known:
		fmt.Fprintf(w, "tokens now\t%s of %d", formatFloat(lv.Tokens), lv.Burst)
		if lv.Exact {
			fmt.Fprintf(w, " (the override's rate %s/s)\n", formatFloat(lv.Rate))
		} else if lv.Rate > 0 {
			fmt.Fprintf(w, " (rate about %s/s, estimated from the key's TTL)\n", formatFloat(lv.Rate))
		} else {
			fmt.Fprintf(w, " (full)\n")
		}
	case lv.Full:
		fmt.Fprintf(w, "tokens now\tfull: no bucket stored (never used, or expired once full)\n")
	default:
		fmt.Fprintf(w, "tokens now\tunknown: %s; %s stored, refilling since\n", unknownWhy(in), formatFloat(in.Tokens))
	}
	if in.Exists {
		fmt.Fprintf(w, "last refill\t%s tokens, %s (burst %d)\n", formatFloat(in.Tokens), ago(in.Updated, in.Now), in.Burst)
		if in.Updated > in.Now {
			fmt.Fprintf(w, "\tfrozen: its refill is reserved until then\n")
		}
		if sh := in.Shares; sh.InForce() {
			fmt.Fprintf(w, "rate shares\t%s/s in force, %s/s of it booked into the next epoch (epoch %d of %v)\n",
				formatFloat(sh.Committed), formatFloat(sh.Booked), sh.Epoch, time.Duration(sh.Period)*time.Microsecond)
		}
		if in.TTL < 0 {
			fmt.Fprintf(w, "key expiry\tnone (the next lease call of a service sets it)\n")
		} else {
			full := "a second after it would be full"
			if in.Shares.InForce() {
				full += ", its shares ended"
			}
			more := ""
			if in.TTL == math.MaxInt64 {
				more = "more than " // saturated (lease.Inspection.TTL)
			}
			fmt.Fprintf(w, "key expiry\tin %s%v (%s)\n", more, in.TTL, full)
		}
	}
	if in.Override != nil {
		fmt.Fprintf(w, "override\t%s\n", describe(quota.FromOverride(*in.Override)))
	} else {
		fmt.Fprintf(w, "override\tnone (the services' quota applies)\n")
	}
	if r := in.Registry; r != nil {
		fmt.Fprintf(w, "instances\t%d active, demanding %s/s in all (summary of %s)", r.Instances, formatFloat(r.Demand), ago(r.At, in.Now))
		if r.WaterLevel >= 0 {
			fmt.Fprintf(w, "; fair share capped at %s/s\n", formatFloat(r.WaterLevel))
		} else {
			fmt.Fprintf(w, "; every demand met\n")
		}
	} else {
		fmt.Fprintf(w, "instances\tno registry summary\n")
	}
	fmt.Fprintf(w, "releases\t%d remembered (applied within %v)\n", in.Releases, lease.ReleaseDedupWindow)
	w.Flush()
	if len(in.Instances) > 0 {
		fmt.Fprintln(e.stdout, "\ninstance registry:")
		w = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  INSTANCE\tLAST ACQUIRE\tDEMAND/S\tCREDIT\tRATE SHARE")
		for _, i := range in.Instances {
			share := "-"
			if r := i.RateShare; r.Held() && in.Shares.Holds(r, time.UnixMicro(in.Now)) {
				share = fmt.Sprintf("%s/s for %v", formatFloat(r.Rate), time.Duration(r.Until.UnixMicro()-in.Now)*time.Microsecond)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", printable(i.ID), ago(i.LastAcquire, in.Now), formatFloat(i.Demand), formatFloat(i.Credit), share)
		}
		w.Flush()
	}
	if len(in.History) > 0 {
		fmt.Fprintf(e.stdout, "\nlevel history (what returns are credited against; burst %d):\n", in.Burst)
		w = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "  UP TO\tLEVEL AT MOST")
		for _, h := range in.History {
			fmt.Fprintf(w, "  %s\t%s\n", ago(h.At, in.Now), formatFloat(h.Level))
		}
		w.Flush()
	}
}
