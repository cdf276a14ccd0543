package syncer

import (
	"testing"
	"time"
)

// TestNodeSilentFromTheFirstPromptTimeout holds redisNode.silent to its
// rule with the times passed in: silence counts from the first call sent
// after the last answer in time that timed out within its deadline's
// length past it; a later timeout says nothing until lateGrace times d
// after the answer; a node never answered is silent; and a call sent
// before the last answer (recorded in a race with it, or before it came)
// neither counts nor keeps a later call from counting. A starvation of the
// process (starvation) counts the silence from its time when later than
// the first prompt timeout, until the grace.
func TestNodeSilentFromTheFirstPromptTimeout(t *testing.T) {
	const (
		d  = time.Second
		to = 10 * time.Millisecond
	)
	t0 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	check := func(n *redisNode, ms int, want bool) {
		t.Helper()
		if got := n.silent(at(ms), d, 0); got != want {
			t.Errorf("silent at %d ms = %v, want %v", ms, got, want)
		}
	}

	if !new(redisNode).silent(t0, d, 0) {
		t.Error("a node never answered is not silent")
	}

	prompt := new(redisNode)
	prompt.answer(at(0), true)
	prompt.timedOutAt(at(300), at(310), to) // asked from 300 ms
	prompt.timedOutAt(at(500), at(510), to) // a later one changes nothing
	check(prompt, 999, false)               // answered within d
	check(prompt, 1299, false)              // asked for less than d
	check(prompt, 1300, true)
	prompt.answer(at(1400), true) // an answer ends it
	check(prompt, 2500, false)

	late := new(redisNode)
	late.answer(at(0), true)
	late.timedOutAt(at(300), at(300+2*10+1), to) // more than its deadline late
	check(late, 1300, false)
	check(late, int(lateGrace*d/time.Millisecond)-1, false)
	check(late, int(lateGrace*d/time.Millisecond), true)

	starved := new(redisNode)
	starved.answer(at(0), true)
	starved.timedOutAt(at(300), at(310), to) // asked from 300 ms
	for _, c := range []struct {
		starvedMs, ms int
		want          bool
	}{
		{0, 1300, true},    // never starved: from 300 ms
		{200, 1300, true},  // starved before it was asked: from 300 ms
		{800, 1300, false}, // starved at 800 ms: from 800 ms
		{800, 1799, false},
		{800, 1800, true},
		{3900, int(lateGrace*d/time.Millisecond) - 1, false},
		{3900, int(lateGrace * d / time.Millisecond), true}, // the grace ends it
	} {
		var st int64
		if c.starvedMs > 0 {
			st = at(c.starvedMs).UnixNano()
		}
		if got := starved.silent(at(c.ms), d, st); got != c.want {
			t.Errorf("starved at %d ms: silent at %d ms = %v, want %v", c.starvedMs, c.ms, got, c.want)
		}
	}

	stale := new(redisNode)
	stale.answer(at(1000), true)
	stale.unanswered.Store(at(900).UnixNano()) // sent before the answer
	check(stale, 2100, false)
	stale.timedOutAt(at(900), at(905), to) // before the answer: nothing
	check(stale, 2100, false)
	stale.timedOutAt(at(1200), at(1210), to)
	check(stale, 2199, false)
	check(stale, 2200, true)
}
