// Package telemetry holds leasequota's OpenTelemetry instruments and spans
// and its structured logs.
//
// Instruments are created once, in New; attribute sets and span options
// are built once too, so recording allocates nothing beyond what the SDK
// does, but the Call or Round of each span (and the options of a round's
// links): TestRecordingAllocatesNothingBeyondTheSDK. The request path
// never calls into this package: decisions are counted with atomics by the
// limiter and reported here through observable instruments, read when the
// SDK collects. Only the syncer records synchronously, once per Redis call.
//
// A nil *Telemetry is valid and records nothing, so the parts that use it
// can be tested without one.
package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Instrumentation scope of every instrument, span and log.
const (
	ScopeName    = "github.com/leasequota/leasequota"
	ScopeVersion = "0.1.0"
)

// Operations of Redis calls, the values of the "operation" attribute.
const (
	OpAcquire = "acquire"
	OpRelease = "release"
)

// Snapshot is what the limiter reports when the SDK collects.
type Snapshot struct {
	// Decisions by reason and outcome; Reasons names reason i.
	Allowed, Denied []int64
	Reasons         []string
	// ModeOf gives the failure mode attribute of reason i ("" for none).
	ModeOf []string
	// Tenants tracked now.
	Tenants int64
	// Degraded is true while Redis calls fail.
	Degraded bool
	// Lease tokens: come to the leases (granted at once, or reserved and
	// come due) and spent by requests, since start.
	TokensGranted, TokensSpent int64
}

// Config is what New needs. Zero fields take the otel globals and
// slog.Default (see the limiter's options); a nil Collect reports no
// decisions, tenants or tokens.
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	// Collect fills a Snapshot; called from the SDK's collection.
	Collect func(*Snapshot)
	// Attributes are added to every measurement (e.g. which of several
	// limiters in one process reports it).
	Attributes []attribute.KeyValue
}

// Telemetry records what a limiter does. Its methods are safe for
// concurrent use.
type Telemetry struct {
	tracer trace.Tracer
	logger *slog.Logger

	leaseRequests metric.Int64Counter
	leaseTokens   metric.Int64Counter
	callDuration  metric.Float64Histogram
	callErrors    metric.Int64Counter
	reg           metric.Registration

	// Attribute sets, built once, each in the slice that Add or Record
	// takes as its options: a slice made at the call (Add(ctx, n, opt))
	// escapes through the instrument's interface, an allocation per Add
	// (TestRecordingAllocatesNothingBeyondTheSDK).
	requested, granted, returned, expired, plain []metric.AddOption
	base                                         []attribute.KeyValue
	ops                                          map[string]callOp
	roundStart                                   [2][]trace.SpanStartOption // by urgent
	// The attributes of a failed call, by operation and error.type: the
	// error counter's set and the span's attribute. Built per failure,
	// they cost 6 allocations a failed call (of every call during an
	// outage: TestFailedCallRecordsWithoutAllocating).
	errAttrs map[[2]string]callErrAttrs

	lastErrLog atomic.Int64 // unix nanoseconds of the last Redis error logged
}

// New creates the instruments and registers the observable ones, which
// call cfg.Collect. Call Close to unregister them.
func New(cfg Config) (*Telemetry, error) {
	// Zero fields take the globals, as Config says.
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Collect == nil {
		cfg.Collect = func(*Snapshot) {}
	}
	meter := cfg.MeterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(ScopeVersion))
	t := &Telemetry{
		tracer: cfg.TracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(ScopeVersion)),
		logger: cfg.Logger,
	}
	var err error
	add := func(e error) {
		if err == nil {
			err = e
		}
	}
	var e error
	t.leaseRequests, e = meter.Int64Counter("leasequota.lease.requests",
		metric.WithUnit("{request}"), metric.WithDescription("Lease requests (one tenant's acquire) sent to Redis."))
	add(e)
	t.leaseTokens, e = meter.Int64Counter("leasequota.lease.tokens",
		metric.WithUnit("{token}"), metric.WithDescription("Tokens asked for, granted by and returned to (credited by) the global buckets, and leased tokens taken back unspent at expiry, by direction."))
	add(e)
	t.callDuration, e = meter.Float64Histogram("leasequota.redis.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of Redis round trips (a pipeline counts once), by operation."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1))
	add(e)
	t.callErrors, e = meter.Int64Counter("leasequota.redis.errors",
		metric.WithUnit("{error}"), metric.WithDescription("Failed Redis round trips, by operation and error.type."))
	add(e)
	decisions, e := meter.Int64ObservableCounter("leasequota.decisions",
		metric.WithUnit("{decision}"), metric.WithDescription("Decisions by outcome, reason and failure mode."))
	add(e)
	tenants, e := meter.Int64ObservableUpDownCounter("leasequota.tenants",
		metric.WithUnit("{tenant}"), metric.WithDescription("Tenants tracked by this limiter."))
	add(e)
	degraded, e := meter.Int64ObservableGauge("leasequota.degraded",
		metric.WithUnit("1"), metric.WithDescription("1 while Redis calls fail (breaker open or probing), else 0."))
	add(e)
	utilization, e := meter.Float64ObservableGauge("leasequota.lease.utilization",
		metric.WithUnit("1"), metric.WithDescription("Tokens spent by requests over tokens that came to the leases, since start."))
	add(e)
	if err != nil {
		return nil, err
	}
	base := cfg.Attributes
	set := func(kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...)
	}
	t.base = base
	addOpts := func(kv ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(set(kv...))}
	}
	t.plain = addOpts()
	t.requested = addOpts(attribute.String("direction", "requested"))
	t.granted = addOpts(attribute.String("direction", "granted"))
	t.returned = addOpts(attribute.String("direction", "returned"))
	t.expired = addOpts(attribute.String("direction", "expired"))
	for i, urgent := range []bool{false, true} {
		t.roundStart[i] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attribute.Bool("leasequota.urgent", urgent))}
	}
	t.ops = map[string]callOp{}
	for _, op := range []string{OpAcquire, OpRelease} {
		t.ops[op] = newCallOp(op, set(attribute.String("operation", op)))
	}
	t.errAttrs = map[[2]string]callErrAttrs{}
	for _, op := range []string{OpAcquire, OpRelease} {
		for _, kind := range errorTypes {
			t.errAttrs[[2]string{op, kind}] = callErrAttrs{
				add:  addOpts(attribute.String("operation", op), attribute.String("error.type", kind)),
				span: []attribute.KeyValue{attribute.String("error.type", kind)},
			}
		}
	}
	plainObs := metric.WithAttributeSet(set())

	// The decision attribute sets depend on the reasons the limiter
	// reports; build them on first collection and keep them.
	// The SDK runs the callback once per reader, each run behind its
	// reader's own lock: with two readers (Prometheus and OTLP) two runs
	// overlap, and the snapshot and sets they shared raced, one run
	// indexing what the other had just emptied (a panic on the SDK's
	// goroutine, which ended the process: TestTwoReadersCollectAtOnce).
	// mu guards sets and snap.
	// seen holds the largest count of each decision series reported so
	// far: a count may fall back for a moment (a multi-tenant decision's
	// turn given back, the denial an AllowNWithin wait replaced), and a
	// cumulative counter that falls reads as a reset to the backend, so
	// the series report the largest seen until the count passes it again.
	// mu guards sets, snap and seen.
	var (
		mu   sync.Mutex
		sets []metric.ObserveOption
		snap Snapshot
		seen []int64 // by series: denied then allowed, per reason (as sets)
	)
	t.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		snap = Snapshot{Allowed: snap.Allowed[:0], Denied: snap.Denied[:0]}
		cfg.Collect(&snap)
		if sets == nil {
			for i, r := range snap.Reasons {
				for _, outcome := range []string{"denied", "allowed"} {
					attrs := []attribute.KeyValue{attribute.String("outcome", outcome), attribute.String("reason", r)}
					if i < len(snap.ModeOf) && snap.ModeOf[i] != "" {
						attrs = append(attrs, attribute.String("mode", snap.ModeOf[i]))
					}
					sets = append(sets, metric.WithAttributeSet(set(attrs...)))
				}
			}
		}
		if len(seen) < len(sets) {
			seen = append(seen, make([]int64, len(sets)-len(seen))...)
		}
		for i := range snap.Reasons {
			// Report only what happened: zero series would crowd the
			// backend with reasons that never occur.
			if i < len(snap.Denied) {
				seen[2*i] = max(seen[2*i], snap.Denied[i])
			}
			if i < len(snap.Allowed) {
				seen[2*i+1] = max(seen[2*i+1], snap.Allowed[i])
			}
			if seen[2*i] > 0 {
				o.ObserveInt64(decisions, seen[2*i], sets[2*i])
			}
			if seen[2*i+1] > 0 {
				o.ObserveInt64(decisions, seen[2*i+1], sets[2*i+1])
			}
		}
		o.ObserveInt64(tenants, snap.Tenants, plainObs)
		var d int64
		if snap.Degraded {
			d = 1
		}
		o.ObserveInt64(degraded, d, plainObs)
		if snap.TokensGranted > 0 {
			o.ObserveFloat64(utilization, float64(snap.TokensSpent)/float64(snap.TokensGranted), plainObs)
		}
		return nil
	}, decisions, tenants, degraded, utilization)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// callErrAttrs are the attributes of a failed call of one operation and
// error.type.
type callErrAttrs struct {
	add  []metric.AddOption   // of leasequota.redis.errors
	span []attribute.KeyValue // of the call's span
}

// callOp is what the calls of one operation share, built once: the span's
// name and start options, and the duration's attribute set.
type callOp struct {
	name     string
	start    []trace.SpanStartOption
	duration []metric.RecordOption
}

// callOp returns the callOp of op: New's, or for an operation New did not
// know one built now.
func (t *Telemetry) callOp(op string) callOp {
	if o, ok := t.ops[op]; ok {
		return o
	}
	return newCallOp(op, attribute.NewSet(append(append([]attribute.KeyValue(nil), t.base...), attribute.String("operation", op))...))
}

// newCallOp builds the callOp of op, whose duration has the attributes
// set.
func newCallOp(op string, set attribute.Set) callOp {
	return callOp{
		name: "leasequota.redis " + op,
		start: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("operation", op))},
		duration: []metric.RecordOption{metric.WithAttributeSet(set)},
	}
}

// Close unregisters the observable instruments.
func (t *Telemetry) Close() error {
	if t == nil || t.reg == nil {
		return nil
	}
	return t.reg.Unregister()
}

// Round is one sync round's span and what it did.
type Round struct {
	span trace.Span
	// attrs holds the span's attributes at End, in the block StartRound
	// allocated the Round in (roundBlock): a slice made for
	// SetAttributes would be an allocation more.
	attrs     *[6]attribute.KeyValue
	Tenants   int   // tenants refreshed (lease requests)
	Requested int64 // tokens asked for
	Granted   int64 // tokens granted
	Returned  int64 // tokens returned
	Calls     int   // Redis round trips
	Failed    int   // lease requests that failed
}

// StartRound starts the span of a sync round; links, if any, are spans of
// requests that asked for it (an urgent refill). It returns ctx carrying
// the span, for the calls of the round.
func (t *Telemetry) StartRound(ctx context.Context, urgent bool, links ...trace.Link) (context.Context, *Round) {
	if t == nil {
		return ctx, &Round{}
	}
	opts := t.roundStart[0]
	if urgent {
		opts = t.roundStart[1]
	}
	if len(links) > 0 {
		opts = append(slices.Clip(opts), trace.WithLinks(links...))
	}
	ctx, span := t.tracer.Start(ctx, "leasequota.sync", opts...)
	b := &roundBlock{}
	b.r.span, b.r.attrs = span, &b.attrs
	return ctx, &b.r
}

// roundBlock is a Round and its span's attributes, allocated at once.
type roundBlock struct {
	r     Round
	attrs [6]attribute.KeyValue
}

// Add adds the totals of part of the round.
func (r *Round) Add(o Round) {
	r.Tenants += o.Tenants
	r.Requested += o.Requested
	r.Granted += o.Granted
	r.Returned += o.Returned
	r.Calls += o.Calls
	r.Failed += o.Failed
}

// End ends the round's span with its totals and outcome.
func (r *Round) End() {
	if r.span == nil {
		return
	}
	a := r.attrs
	a[0] = attribute.Int("leasequota.tenants", r.Tenants)
	a[1] = attribute.Int64("leasequota.tokens.requested", r.Requested)
	a[2] = attribute.Int64("leasequota.tokens.granted", r.Granted)
	a[3] = attribute.Int64("leasequota.tokens.returned", r.Returned)
	a[4] = attribute.Int("leasequota.redis.calls", r.Calls)
	n := 5
	if r.Failed > 0 {
		r.span.SetStatus(codes.Error, "lease requests failed")
		a[5] = attribute.Int("leasequota.failed", r.Failed)
		n = 6
	}
	r.span.SetAttributes(a[:n]...)
	r.span.End()
}

// Call is one Redis round trip in flight.
type Call struct {
	t     *Telemetry
	span  trace.Span
	op    string
	start time.Time
	// size is the span's pipeline size attribute, set from here: a
	// slice of the Call, which is on the heap anyway, where one made
	// for SetAttributes or WithAttributes would be an allocation more.
	size [1]attribute.KeyValue
}

// StartCall starts the span of one Redis round trip of op with size
// commands (the pipeline size).
func (t *Telemetry) StartCall(ctx context.Context, op string, size int) (context.Context, *Call) {
	if t == nil {
		return ctx, &Call{}
	}
	o := t.callOp(op)
	ctx, span := t.tracer.Start(ctx, o.name, o.start...)
	c := &Call{t: t, span: span, op: op, start: time.Now(), size: [1]attribute.KeyValue{attribute.Int("leasequota.pipeline.size", size)}}
	span.SetAttributes(c.size[:]...)
	return ctx, c
}

// End records the call's duration and error, and ends its span. A call
// the circuit breaker refused (error.type breaker_open) never reached
// Redis: its error counts, its duration does not (it was counted as a
// round trip, seven for each one sent during an outage).
//
// A failed call's span gets what OpenTelemetry's semantic conventions
// for errors on spans ask (general/recording-errors, v1.44.0): status
// Error, the error's message as its description, and error.type, the
// value the error counter has. It gets no exception event
// (span.RecordError): those conventions deprecate exception span events
// (exceptions/exceptions-spans) for log records, and advise against
// recording errors the library handles, as the limiter handles these
// (its failure mode decides); the message is in the status description
// already, and in the throttled Warn log. The event would cost 6
// allocations a failed span with the SDK (none with a no-op provider),
// breaker refusals included, seven for each call sent during an outage.
func (c *Call) End(err error) {
	if c.t == nil {
		return
	}
	kind := ""
	if err != nil {
		kind = ErrorType(err)
	}
	if kind != "breaker_open" {
		c.t.callDuration.Record(context.Background(), time.Since(c.start).Seconds(), c.t.callOp(c.op).duration...)
	}
	if err != nil {
		a, ok := c.t.errAttrs[[2]string{c.op, kind}]
		if !ok { // an operation or error type New did not know
			a = callErrAttrs{
				add: []metric.AddOption{metric.WithAttributes(append(append([]attribute.KeyValue(nil), c.t.base...),
					attribute.String("operation", c.op), attribute.String("error.type", kind))...)},
				span: []attribute.KeyValue{attribute.String("error.type", kind)},
			}
		}
		c.t.callErrors.Add(context.Background(), 1, a.add...)
		c.span.SetStatus(codes.Error, err.Error())
		c.span.SetAttributes(a.span...)
		c.t.logError(c.op, kind, err)
	}
	c.span.End()
}

// logError logs a Redis error at most once a second.
func (t *Telemetry) logError(op, kind string, err error) {
	now := time.Now().UnixNano()
	last := t.lastErrLog.Load()
	// A wall clock stepped back since the last log (now before last)
	// logs: the errors are not silenced for as long as the step.
	if d := now - last; d >= 0 && d < int64(time.Second) || !t.lastErrLog.CompareAndSwap(last, now) {
		return
	}
	t.logger.Warn("leasequota: Redis call failed", "operation", op, "error.type", kind, "error", err)
}

// errorTypes are the values ErrorType returns.
var errorTypes = []string{"timeout", "canceled", "connection", "pool_exhausted", "breaker_open", "noscript", "script", "other"}

// ErrorType classifies a Redis call's error for the error.type attribute:
// timeout, canceled, connection, pool_exhausted, breaker_open, noscript,
// script, or other.
//
// pool_exhausted is go-redis's own pool with no connection to give the
// call: none came back within its PoolTimeout (redis.ErrPoolTimeout, "redis:
// connection pool timeout") or every one it may open is out on another
// call (redis.ErrPoolExhausted, at once with MaxActiveConns). The call
// never reached Redis, and the fix is on the client (PoolSize,
// MaxActiveConns, PoolTimeout) or in Redis's latency, which holds the
// connections: neither a Redis timeout nor a refused connection, it was
// classed other. The syncer takes it for congestion, as it takes a
// timeout (syncer's timedOut).
func ErrorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return "pool_exhausted"
	case strings.Contains(err.Error(), "circuit breaker is open"), strings.Contains(err.Error(), "too many requests"):
		return "breaker_open"
	}
	// Asked only here: the net.Error errors.As fills escapes, an
	// allocation that the cases above need not pay.
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case ne != nil, strings.Contains(err.Error(), "connection refused"), strings.Contains(err.Error(), "EOF"):
		return "connection"
	case strings.Contains(err.Error(), "NOSCRIPT"):
		return "noscript"
	case strings.Contains(err.Error(), "leasequota:"):
		return "script"
	}
	return "other"
}

// Leases records lease requests and tokens (asked for, granted, returned).
func (t *Telemetry) Leases(requests int, requested, granted, returned int64) {
	if t == nil {
		return
	}
	ctx := context.Background()
	if requests > 0 {
		t.leaseRequests.Add(ctx, int64(requests), t.plain...)
	}
	if requested > 0 {
		t.leaseTokens.Add(ctx, requested, t.requested...)
	}
	if granted > 0 {
		t.leaseTokens.Add(ctx, granted, t.granted...)
	}
	if returned > 0 {
		t.leaseTokens.Add(ctx, returned, t.returned...)
	}
}

// Expired records leased tokens taken back unspent at the end of their
// lifetime: returned to Redis, or forfeited without a call when the
// return would find the bucket full (the syncer's Planner.ReturnsExpired).
func (t *Telemetry) Expired(n int64) {
	if t == nil || n <= 0 {
		return
	}
	t.leaseTokens.Add(context.Background(), n, t.expired...)
}

// LeaseGranted logs one tenant's lease at Debug: the tenant, what was asked
// and granted, the tokens this instance now holds and the tokens left in
// the global bucket.
func (t *Telemetry) LeaseGranted(ctx context.Context, tenant string, asked, granted, held int64, global float64) {
	if t == nil || !t.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	if len(tenant) > 64 {
		tenant = tenant[:64] + "…"
	}
	t.logger.LogAttrs(ctx, slog.LevelDebug, "leasequota: lease",
		slog.String("tenant", tenant), slog.Int64("asked", asked), slog.Int64("granted", granted),
		slog.Int64("held", held), slog.Float64("global_tokens_left", global))
}

// Logger returns the logger; of a nil *Telemetry, which records nothing,
// one that writes nothing.
func (t *Telemetry) Logger() *slog.Logger {
	if t == nil {
		return slog.New(slog.DiscardHandler)
	}
	return t.logger
}
