//go:build race

package syncer_test

// raceEnabled: the race detector is on (make unit), which runs the
// simulations 5-10x slower; simDuration shortens them.
const raceEnabled = true
