package lease

// Reading the numbers in a script's reply.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// replyInt accepts an integer reply, or a string holding a decimal integer
// (what a script returns if it formats its numbers).
func replyInt(v interface{}) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("got %T %v, want an integer", v, v)
}

// replyFloat accepts a string holding a finite decimal number, or an integer
// reply.
func replyFloat(v interface{}) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case string:
		return parseFinite(x)
	}
	return 0, fmt.Errorf("got %T %v, want a number", v, v)
}

// parseFinite reads a finite decimal number.
func parseFinite(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("got %q, want a finite number", s)
	}
	return f, nil
}

// cutFields cuts s at each sep into f, the fields of a script's reply,
// without allocating, and returns how many fields s has: len(f) + 1 when
// it has more than f holds (f then holds the first len(f)).
func cutFields(s, sep string, f []string) int {
	n := 0
	for rest, more := s, true; more; n++ {
		if n == len(f) {
			return n + 1
		}
		f[n], rest, more = strings.Cut(rest, sep)
	}
	return n
}
