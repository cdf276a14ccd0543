package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := parseConfig(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg != DefaultConfig() {
		t.Fatalf("no flags: got %+v, want the defaults %+v", cfg, DefaultConfig())
	}
	if cfg.Instances != 4 || cfg.Tenants != 50 || cfg.Scenario != "steady" || cfg.Duration != 10*time.Second || cfg.Baseline != 3*time.Second {
		t.Fatalf("defaults drifted from the documented ones: %+v", cfg)
	}
}

func TestParseConfigFlags(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.html")
	cfg, err := parseConfig([]string{
		"-instances", "3", "-tenants", "7", "-duration", "2s", "-scenario", "churn",
		"-redis", "redis://127.0.0.1:6380/2", "-report", report, "-baseline", "0",
		"-load", "0.5", "-refresh", "50ms", "-lease-ttl", "500ms", "-redis-timeout", "20ms",
		"-failure-mode", "closed", "-workers", "1", "-seed", "9", "-progress=false",
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Instances: 3, Tenants: 7, Duration: 2 * time.Second, Scenario: "churn",
		RedisURL: "redis://127.0.0.1:6380/2", Report: report, Baseline: 0, Load: 0.5,
		Refresh: 50 * time.Millisecond, LeaseTTL: 500 * time.Millisecond, Timeout: 20 * time.Millisecond,
		Failure: "closed", Workers: 1, Seed: 9, Progress: false}
	if cfg != want {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
	if got := cfg.redisTimeout(); got != 20*time.Millisecond {
		t.Errorf("redisTimeout = %v, want the flag's 20ms", got)
	}
}

func TestParseConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-instances", "0"}, "-instances 0"},
		{[]string{"-instances", "33"}, "-instances 33"},
		{[]string{"-tenants", "0"}, "-tenants 0"},
		{[]string{"-tenants", "5000"}, "-tenants 5000"},
		{[]string{"-duration", "100ms"}, "-duration 100ms"},
		{[]string{"-duration", "2h"}, "-duration 2h0m0s"},
		{[]string{"-baseline", "-1s"}, "-baseline -1s"},
		{[]string{"-baseline", "2m"}, "-baseline 2m0s"},
		{[]string{"-load", "0"}, "-load 0"},
		{[]string{"-load", "NaN"}, "-load NaN"},
		{[]string{"-load", "101"}, "-load 101"},
		{[]string{"-refresh", "0s"}, "-refresh 0s"},
		{[]string{"-lease-ttl", "50ms"}, "-lease-ttl 50ms"},
		{[]string{"-redis-timeout", "-1s"}, "-redis-timeout -1s"},
		{[]string{"-workers", "0"}, "-workers 0"},
		{[]string{"-shares", "500ms"}, "-shares 500ms"},
		{[]string{"-shares", "-1s"}, "-shares -1s"},
		{[]string{"-shares", "10s", "-reservation", "2s"}, "-shares and -reservation"},
		{[]string{"-busy", "-1"}, "-busy -1"},
		{[]string{"-busy", "65"}, "-busy 65"},
		{[]string{"-scenario", "chaos"}, `-scenario "chaos"`},
		{[]string{"-scenario", "skew", "-instances", "1"}, "needs -instances >= 2"},
		{[]string{"-scenario", "churn", "-instances", "1"}, "needs -instances >= 2"},
		{[]string{"-scenario", "tight", "-instances", "2"}, "needs -instances >= 3 and -tenants >= 4"},
		{[]string{"-scenario", "tight", "-tenants", "3"}, "needs -instances >= 3 and -tenants >= 4"},
		{[]string{"-failure-mode", "maybe"}, `-failure-mode "maybe"`},
		{[]string{"-redis", "http://localhost"}, `-redis "http://localhost"`},
		{[]string{"-report", filepath.Join(dir, "missing", "r.html")}, "does not exist"},
		{[]string{"-report", dir}, "is a directory"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"-instances", "four"}, "invalid value"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := parseConfig(tc.args, &bytes.Buffer{})
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", tc.args, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q does not say %q", tc.args, err, tc.want)
		}
	}
}

// TestRunFlagErrorsExit2 checks the exit status and message of bad flags
// through the whole program, without running anything.
func TestRunFlagErrorsExit2(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-instances", "-3"}, &stdout, &stderr, false)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "-instances -3: want 1..32") || !strings.Contains(stderr.String(), "-h") {
		t.Fatalf("stderr %q should name the flag, the range and point at -h", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("nothing should go to stdout, got %q", stdout.String())
	}
}

// TestHelpDocumentsEveryFlag checks that -h exits 0 and lists every flag
// with its default.
func TestHelpDocumentsEveryFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &stdout, &stderr, false); code != exitOK {
		t.Fatalf("-h: exit %d, want 0 (stderr %q)", code, stderr.String())
	}
	help := stdout.String()
	n := 0
	// Every flag parseConfig defines must be in the help, with a default.
	for _, name := range []string{"instances", "tenants", "duration", "scenario", "redis", "report", "baseline",
		"load", "refresh", "lease-ttl", "redis-timeout", "failure-mode", "workers", "seed", "progress", "metrics", "redis-cluster", "reservation", "shares", "busy"} {
		n++
		i := strings.Index(help, "  -"+name+" ")
		if i < 0 {
			i = strings.Index(help, "  -"+name+"\n")
		}
		if i < 0 {
			t.Errorf("-h does not list -%s", name)
			continue
		}
		entry := help[i:]
		if j := strings.Index(entry[3:], "\n  -"); j >= 0 {
			entry = entry[:j+3]
		}
		if !strings.Contains(entry, "default") {
			t.Errorf("-h does not give the default of -%s:\n%s", name, entry)
		}
	}
	for _, s := range scenarios {
		if !strings.Contains(help, "  "+s+" ") {
			t.Errorf("-h does not describe scenario %s", s)
		}
	}
	if n != countFlags(t) {
		t.Errorf("the test checks %d flags, parseConfig defines %d: update the list", n, countFlags(t))
	}
}

// countFlags counts the flags in the usage text.
func countFlags(t *testing.T) int {
	var out bytes.Buffer
	_, _ = parseConfig([]string{"-h"}, &out)
	return strings.Count(out.String(), "\n  -")
}

func TestRedisLabelHidesPassword(t *testing.T) {
	c := DefaultConfig()
	c.RedisURL = "redis://user:secret@10.1.2.3:6380/4"
	if l := c.redisLabel(); strings.Contains(l, "secret") || !strings.Contains(l, "10.1.2.3:6380") {
		t.Fatalf("label %q", l)
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("a regular file is not a terminal")
	}
}
