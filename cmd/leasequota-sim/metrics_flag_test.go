package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestMetricsBadAddressExit2: a -metrics value that is no host:port is a
// bad flag, exit status 2 before anything runs, as -h's "2 for bad flags"
// says; it was only found by net.Listen after Redis was started, and the
// run exited 1, the status of a violated bound.
func TestMetricsBadAddressExit2(t *testing.T) {
	for _, addr := range []string{"localhost", "localhost:notaport", "127.0.0.1:99999"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"-metrics", addr, "-duration", "1s", "-baseline", "0", "-progress=false"}, &stdout, &stderr, false)
		if code != exitUsage {
			t.Errorf("-metrics %q: exit %d, want %d (stderr %q)", addr, code, exitUsage, stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), "-metrics") || !strings.Contains(stderr.String(), "-h") {
			t.Errorf("-metrics %q: stderr %q should name the flag and point at -h", addr, stderr.String())
		}
	}
}
