//go:build !race

package syncer_test

// raceEnabled: the race detector is off (make simulation runs the
// simulations at full length so).
const raceEnabled = false
