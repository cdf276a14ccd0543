package schedwait

import "testing"

// TestAtLeast holds a count of the runtime's waits to its rule: what grew
// in a bucket whose lower bound is at least the threshold, and nothing
// below it.
func TestAtLeast(t *testing.T) {
	buckets := []float64{0, 0.01, 0.05, 0.1, 1} // 4 buckets
	for _, c := range []struct {
		name      string
		prev, cur []uint64
		want      uint64
	}{
		{"no growth", []uint64{5, 3, 2, 1}, []uint64{5, 3, 2, 1}, 0},
		{"below the threshold", []uint64{5, 3, 2, 1}, []uint64{9, 7, 2, 1}, 0},
		{"in the bucket at the threshold", []uint64{5, 3, 2, 1}, []uint64{5, 3, 3, 1}, 1},
		{"in the last bucket", []uint64{5, 3, 2, 1}, []uint64{5, 3, 2, 4}, 3},
		{"in both", []uint64{5, 3, 2, 1}, []uint64{5, 3, 4, 2}, 3},
		{"a bucket new since", []uint64{5, 3}, []uint64{5, 3, 0, 1}, 1},
		{"no read served", nil, nil, 0},
	} {
		if got := AtLeast(c.prev, c.cur, buckets, 0.05); got != c.want {
			t.Errorf("%s: AtLeast = %d, want %d", c.name, got, c.want)
		}
	}
}
