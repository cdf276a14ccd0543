// Package schedwait counts how long this process's goroutines waited,
// runnable, before they ran, from the Go runtime's distribution of those
// waits (runtime/metrics, Metric): the reading by which a limiter tells a
// process that could not run its calls in time from a silent Redis
// (syncer/starved.go), and by which the integration tests tell a starved
// test process from a fault. One rule, so that the two read the same.
package schedwait

// Metric is the runtime/metrics name of the distribution: a
// Float64Histogram of waits, in seconds.
const Metric = "/sched/latencies:seconds"

// AtLeast returns how many waits of at least threshold seconds came
// between two reads of the distribution, prev then cur (their counts;
// buckets are cur's boundaries, len(cur) + 1 of them): the growth of the
// buckets whose lower bound is threshold or more, waits that certainly
// lasted that long. A bucket prev does not have counts from zero.
func AtLeast(prev, cur []uint64, buckets []float64, threshold float64) uint64 {
	var n uint64
	for i := len(cur) - 1; i >= 0 && i < len(buckets) && buckets[i] >= threshold; i-- {
		var before uint64
		if i < len(prev) {
			before = prev[i]
		}
		if cur[i] > before {
			n += cur[i] - before
		}
	}
	return n
}
