package integration

import (
	"testing"

	"github.com/leasequota/leasequota/integration/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
