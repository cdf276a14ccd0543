package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestWriteJSONErrorPrefix: an encoding error names its package once.
// encoding/json's errors begin with "json: " already; wrapped in another,
// the command printed "json: json: unsupported value: NaN".
func TestWriteJSONErrorPrefix(t *testing.T) {
	var out bytes.Buffer
	err := writeJSON(&env{stdout: &out}, map[string]float64{"level": math.NaN()})
	if err == nil {
		t.Fatal("writeJSON of NaN: no error")
	}
	if msg := err.Error(); strings.Count(msg, "json: ") != 1 || !strings.HasPrefix(msg, "json: ") {
		t.Errorf("writeJSON of NaN: error %q, want one \"json: \" prefix", msg)
	}
	if out.Len() != 0 {
		t.Errorf("writeJSON of NaN wrote %q", out.String())
	}
}
