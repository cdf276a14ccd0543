package main

import (
	"testing"

	"github.com/leasequota/leasequota/integration/redistest"
)

// TestMain stops the shared real Redis (for the -redis test) at the end.
func TestMain(m *testing.M) { redistest.Main(m) }
