package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasequota/leasequota/telemetry"
)

// TestNilTelemetryRecordsNothing: the package says a nil *Telemetry is
// valid and records nothing, so that the parts that use it can be tested
// without one. Every method must then work on nil; Logger panicked (nil
// pointer dereference), where a logger that writes nothing is what a
// Telemetry that records nothing has.
func TestNilTelemetryRecordsNothing(t *testing.T) {
	var tel *telemetry.Telemetry
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a method of a nil *Telemetry panicked: %v", r)
		}
	}()
	ctx := context.Background()
	_, round := tel.StartRound(ctx, true)
	round.Add(telemetry.Round{Tenants: 1, Failed: 1})
	round.End()
	_, call := tel.StartCall(ctx, telemetry.OpAcquire, 1)
	call.End(errors.New("boom"))
	tel.Leases(1, 2, 3, 4)
	tel.Expired(5)
	tel.LeaseGranted(ctx, "t", 1, 1, 1, 1)
	if err := tel.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	logger := tel.Logger()
	if logger == nil {
		t.Fatal("Logger: nil")
	}
	if logger.Enabled(ctx, 1<<20) {
		t.Error("Logger of a nil *Telemetry is enabled: it records nothing")
	}
	logger.Error("written nowhere")
}
