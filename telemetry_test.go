package leasequota_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/telemetry"
)

// metrics collects the reader's metrics by name.
func metrics(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName || sm.Scope.Version != telemetry.ScopeVersion {
			t.Errorf("scope %q %q, want %q %q", sm.Scope.Name, sm.Scope.Version, telemetry.ScopeName, telemetry.ScopeVersion)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumWhere adds the int64 sum data points whose attributes include kv.
func sumWhere(t *testing.T, m metricdata.Metrics, kv ...attribute.KeyValue) int64 {
	t.Helper()
	var total int64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
	points:
		for _, p := range d.DataPoints {
			for _, want := range kv {
				if v, ok := p.Attributes.Value(want.Key); !ok || v != want.Value {
					continue points
				}
			}
			total += p.Value
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			total += p.Value
		}
	default:
		t.Fatalf("%s: data %T", m.Name, m.Data)
	}
	return total
}

// TestTelemetry runs a known workload with SDK providers and checks every
// instrument, the span tree of sync rounds, and the logs. (The store is
// in process; the instruments and spans are named after Redis, the store
// of production.)
func TestTelemetry(t *testing.T) {
	store := setup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	logger, logs := captureLogger(t, slog.LevelDebug)

	// MinLease = Burst: the first lease takes the whole bucket, and at a
	// rate of one token per 1000 s nothing refills, so the counts below
	// are exact.
	l, err := leasequota.NewWithStore(store,
		leasequota.WithMeterProvider(mp), leasequota.WithTracerProvider(tp), leasequota.WithLogger(logger),
		// A long interval keeps the loop's rounds out of the way: the cold
		// start's urgent call is the only one.
		leasequota.WithRefreshInterval(time.Hour), leasequota.WithLeaseTTL(2*time.Hour),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.001, Burst: 10, MinLease: 10}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())

	// A request carrying a span: its cold start links to it.
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	if d := l.AllowN(ctx, "a", 1); !d.Allowed || d.Reason != leasequota.ReasonColdStart {
		t.Fatalf("first request: %+v", d)
	}
	parent.End()
	for i := 0; i < 9; i++ {
		if !l.Allow("a") {
			t.Fatalf("request %d of burst 10 denied", i+2)
		}
	}
	for i := 0; i < 5; i++ {
		if l.Allow("a") {
			t.Fatal("admitted beyond the burst")
		}
	}
	if d := l.AllowN(context.Background(), "a", 0); d.Reason != leasequota.ReasonInvalidN {
		t.Fatalf("n=0: %+v", d)
	}

	m := metrics(t, reader)
	for _, name := range []string{"leasequota.decisions", "leasequota.lease.requests", "leasequota.lease.tokens",
		"leasequota.redis.duration", "leasequota.tenants", "leasequota.degraded", "leasequota.lease.utilization"} {
		if _, ok := m[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	dec := m["leasequota.decisions"]
	if got := sumWhere(t, dec, attribute.String("outcome", "allowed"), attribute.String("reason", "leased")); got != 9 {
		t.Errorf("decisions allowed/leased = %d, want 9", got)
	}
	if got := sumWhere(t, dec, attribute.String("outcome", "allowed"), attribute.String("reason", "cold_start")); got != 1 {
		t.Errorf("decisions allowed/cold_start = %d, want 1", got)
	}
	if got := sumWhere(t, dec, attribute.String("outcome", "denied"), attribute.String("reason", "exhausted")); got != 5 {
		t.Errorf("decisions denied/exhausted = %d, want 5", got)
	}
	if got := sumWhere(t, dec, attribute.String("outcome", "denied"), attribute.String("reason", "invalid_n")); got != 1 {
		t.Errorf("decisions denied/invalid_n = %d, want 1", got)
	}
	if got := sumWhere(t, m["leasequota.lease.tokens"], attribute.String("direction", "granted")); got != 10 {
		t.Errorf("tokens granted = %d, want 10", got)
	}
	if got := sumWhere(t, m["leasequota.lease.requests"]); got < 1 {
		t.Errorf("lease requests = %d, want >= 1", got)
	}
	if got := sumWhere(t, m["leasequota.tenants"]); got != 1 {
		t.Errorf("tenants = %d, want 1", got)
	}
	if got := sumWhere(t, m["leasequota.degraded"]); got != 0 {
		t.Errorf("degraded = %d, want 0", got)
	}
	if u := m["leasequota.lease.utilization"].Data.(metricdata.Gauge[float64]).DataPoints; len(u) != 1 || u[0].Value != 1 {
		t.Errorf("utilization = %+v, want 1 (10 spent of 10 granted)", u)
	}
	h := m["leasequota.redis.duration"]
	if h.Unit != "s" {
		t.Errorf("duration unit %q, want s", h.Unit)
	}
	var acquires uint64
	for _, p := range h.Data.(metricdata.Histogram[float64]).DataPoints {
		if v, _ := p.Attributes.Value("operation"); v.AsString() == telemetry.OpAcquire {
			acquires += p.Count
		}
	}
	if acquires < 1 {
		t.Error("no acquire duration recorded")
	}

	// The span tree: the cold start's round, linked to the request, with
	// a Redis call as its child.
	var round sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == "leasequota.sync" {
			for _, link := range s.Links() {
				if link.SpanContext.SpanID() == parent.SpanContext().SpanID() {
					round = s
				}
			}
		}
	}
	if round == nil {
		t.Fatal("no sync round span linked to the request's span")
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range round.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["leasequota.tokens.granted"].AsInt64() != 10 || attrs["leasequota.tenants"].AsInt64() != 1 || !attrs["leasequota.urgent"].AsBool() {
		t.Errorf("round attributes %v", attrs)
	}
	var child sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Parent().SpanID() == round.SpanContext().SpanID() {
			child = s
		}
	}
	if child == nil || child.Name() != "leasequota.redis acquire" || child.SpanKind() != trace.SpanKindClient {
		t.Fatalf("round's child span: %v", child)
	}
	if !strings.Contains(logs.String(), "leasequota: lease") || !strings.Contains(logs.String(), "tenant=a") {
		t.Errorf("no debug lease summary in the logs:\n%s", logs.String())
	}
}

// TestTelemetryErrors takes the store (Redis) down and checks the error
// metric, the span status and the degraded gauge and log.
func TestTelemetryErrors(t *testing.T) {
	store := faultySetup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	logger, logs := captureLogger(t, slog.LevelInfo)
	l, err := leasequota.NewWithStore(store,
		leasequota.WithMeterProvider(mp), leasequota.WithTracerProvider(tp), leasequota.WithLogger(logger),
		leasequota.WithRefreshInterval(20*time.Millisecond), leasequota.WithColdStartWait(0),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 10}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	store.SetDown(nil)
	deadline := time.Now().Add(5 * time.Second)
	for !l.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("not degraded 5s after the store went down")
		}
		l.Allow("t") // each miss asks for a lease, which fails
		time.Sleep(5 * time.Millisecond)
	}
	// Degraded turns true when the breaker opens, inside the third failed
	// call; the call's error is counted, and the mode change logged, as
	// that call returns: polled, not read at once (read at once, 2 of 15
	// runs saw 2 errors and no log line).
	var m map[string]metricdata.Metrics
	for {
		m = metrics(t, reader)
		errs := sumWhere(t, m["leasequota.redis.errors"], attribute.String("operation", telemetry.OpAcquire))
		if errs >= 3 && strings.Contains(logs.String(), "Redis unreachable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis errors = %d, and the mode change logged %d times, 5s after the store went down; want >= 3 (the breaker opens after 3) and once:\n%s",
				errs, strings.Count(logs.String(), "Redis unreachable"), logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := sumWhere(t, m["leasequota.degraded"]); got != 1 {
		t.Errorf("degraded gauge = %d, want 1", got)
	}
	var failed bool
	for _, s := range spans.Ended() {
		if s.Name() == "leasequota.redis acquire" && s.Status().Code == codes.Error {
			for _, kv := range s.Attributes() {
				if kv.Key == "error.type" && kv.Value.AsString() != "" {
					failed = true
				}
			}
		}
	}
	if !failed {
		t.Error("no failed Redis span with error.type")
	}
	if n := strings.Count(logs.String(), "Redis unreachable"); n != 1 {
		t.Errorf("mode change logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "Redis call failed"); n < 1 || n > 6 {
		t.Errorf("Redis errors logged %d times in a few seconds, want rate-limited to about one a second", n)
	}
}

// TestTwoReadersCollectAtOnce: a MeterProvider with two readers (say
// Prometheus and an OTLP exporter) collects from both at once without a
// race or a panic. The SDK runs the limiter's callback once per reader,
// concurrently, and the runs shared the callback's snapshot: one indexed
// what the other had just emptied, an index out of range on the SDK's
// goroutine, which ended the process.
func TestTwoReadersCollectAtOnce(t *testing.T) {
	r1, r2 := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r1), sdkmetric.WithReader(r2))
	l, err := leasequota.NewWithStore(setup(t), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}),
		leasequota.WithMeterProvider(mp), leasequota.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	for range 50 {
		l.Allow("a")
	}
	done := make(chan error, 2)
	for _, r := range []*sdkmetric.ManualReader{r1, r2} {
		go func() {
			var err error
			for range 2000 {
				var rm metricdata.ResourceMetrics
				if err = r.Collect(context.Background(), &rm); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := metrics(t, r1)["leasequota.decisions"]; got.Name == "" {
		t.Errorf("no leasequota.decisions after the collections")
	}
}
