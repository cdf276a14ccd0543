package lease

// Refill returns the level of a bucket that held tokens at from
// (microseconds), refilled at rate tokens per second up to burst as of
// to (no earlier than from), and never below zero. It is common.lua's
// read_bucket in Go, in the script's operations and their order, so that
// its float64s are the script's: the in-process store (memstore) and the
// operator's view of a bucket (BucketState.Level) both call it.
func Refill(tokens float64, from, to int64, rate float64, burst int64) float64 {
	t := tokens + float64(to-from)*rate/1e6
	if t > float64(burst) {
		t = float64(burst)
	}
	if t < 0 {
		t = 0
	}
	return t
}
