package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsServer serves the limiters' OpenTelemetry metrics in the
// Prometheus text format at /metrics (-metrics ADDR).
type metricsServer struct {
	Provider *sdkmetric.MeterProvider
	Addr     string // the address it listens on (useful with port 0)
	srv      *http.Server
	done     chan error
}

// startMetrics listens on addr and serves /metrics from a new
// MeterProvider backed by the OpenTelemetry Prometheus exporter.
func startMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("-metrics: exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		Addr:     ln.Addr().String(),
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		done:     make(chan error, 1),
	}
	go func() { m.done <- m.srv.Serve(ln) }()
	return m, nil
}

// Close stops the server and the provider.
func (m *metricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if serveErr := <-m.done; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return errors.Join(err, m.Provider.Shutdown(ctx))
}
