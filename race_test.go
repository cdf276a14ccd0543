//go:build race

package leasequota_test

// raceEnabled: the race detector is on (make unit), which runs the
// simulations 5-10x slower; the longest of them leave it to make
// simulation.
const raceEnabled = true
