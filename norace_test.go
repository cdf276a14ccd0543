//go:build !race

package leasequota_test

// raceEnabled: the race detector is off (make simulation runs the
// longer simulations so).
const raceEnabled = false
