package telemetry_test

import (
	"testing"

	"github.com/leasequota/leasequota/telemetry"
)

// TestZeroConfigTakesTheGlobals: New with a zero Config takes the otel
// globals and slog.Default, as Config says; it dereferenced the nil
// MeterProvider.
func TestZeroConfigTakesTheGlobals(t *testing.T) {
	tel, err := telemetry.New(telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tel.Close()
}
