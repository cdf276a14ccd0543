package main

import (
	"testing"

	"github.com/leasequota/leasequota/integration/redistest"
)

// TestMain runs the tests through redistest.Main: it sends go-redis's own
// log to the tests that hold a redistest.Logger (TestUnreachableRedisFails
// does, for its dial failures), and stops the shared real Redis (for the
// -redis test) at the end.
func TestMain(m *testing.M) {
	redistest.Main(m)
}
