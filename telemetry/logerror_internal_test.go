package telemetry

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestErrorLogAfterClockStepBack: Redis errors are logged at most once a
// second, timed by the wall clock; one stepped back since the last log
// (that log's time is ahead of now) must not silence them until it
// catches up, as it did, for as long as the step.
func TestErrorLogAfterClockStepBack(t *testing.T) {
	var buf bytes.Buffer
	tel, err := New(Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	fail := errors.New("test: down")
	tel.logError("acquire", "other", fail)
	tel.logError("acquire", "other", fail) // within the second: not logged
	if n := strings.Count(buf.String(), "Redis call failed"); n != 1 {
		t.Fatalf("%d logs of two errors within a second, want 1", n)
	}
	tel.lastErrLog.Store(time.Now().Add(time.Hour).UnixNano()) // the clock stepped back an hour
	tel.logError("acquire", "other", fail)
	if n := strings.Count(buf.String(), "Redis call failed"); n != 2 {
		t.Errorf("an error after the wall clock stepped back an hour was not logged (%d logs)", n)
	}
}
