package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMetricsFlag runs a short simulation with -metrics on a free port and
// scrapes /metrics while it runs: the limiters' instruments are there,
// labelled per instance.
func TestMetricsFlag(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 2 * time.Second
	cfg.Baseline = 0
	cfg.Progress = false
	cfg.Tenants = 5
	cfg.Instances = 2
	cfg.Metrics = "127.0.0.1:0"
	m, err := startMetrics(cfg.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	// Run with the server started here, so the test knows its address.
	cfg.Metrics = ""
	ctx := context.Background()
	w := newWorkload(cfg)
	be, err := openBackend(ctx, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	r := newRunner(cfg, w, be)
	r.metrics = m
	scraped := make(chan string, 1)
	go func() {
		// Scrape once the limiters have had time to decide and lease.
		deadline := time.Now().Add(cfg.Duration)
		for time.Now().Before(deadline) {
			resp, err := http.Get("http://" + m.Addr + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), "leasequota_decisions") && strings.Contains(string(b), "leasequota_lease_requests") {
					scraped <- string(b)
					return
				}
			}
			time.Sleep(100 * time.Millisecond) // pacing the scrape; bounded by the deadline
		}
		scraped <- ""
	}()
	if _, err := r.run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	body := <-scraped
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	if body == "" {
		t.Fatal("no leasequota metrics scraped from -metrics while the simulation ran")
	}
	for _, want := range []string{"leasequota_decisions", "leasequota_lease_requests", "leasequota_redis_duration_seconds", `leasequota_limiter="instance-0"`, `leasequota_limiter="instance-1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestMetricsFlagBadAddress(t *testing.T) {
	if _, err := startMetrics("256.0.0.1:bad"); err == nil || !strings.Contains(err.Error(), "-metrics") {
		t.Errorf("startMetrics(bad) = %v, want an error naming -metrics", err)
	}
}
