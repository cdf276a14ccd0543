package main

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/integration/redistest"
)

// TestMain silences go-redis's own log, as main does (TestUnreachableRedisFails
// would otherwise print its dial failures), and stops the shared real Redis
// (for the -redis test) at the end.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	redistest.Main(m)
}
