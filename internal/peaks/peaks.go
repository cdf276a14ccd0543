// Package peaks is the Go model of the level history that the lease
// scripts keep in each bucket (the hash fields p1..p8, see lease/common.lua),
// for the tests that check the scripts against it and for the syncer's
// simulation. It is pure: no clock, no I/O; times are Redis TIME in
// microseconds, passed in.
//
// # The question it answers
//
// Tokens granted at time g and returned at now may be credited with what
// the bucket would hold more now had they never been granted: their
// amount, less what that bucket would have lost to the cap, which is
// Burst − (the highest level since the grant's debit). So a release needs
// the peak of the bucket's level over (g, now].
//
// Between two calls on a bucket its level only rises (refill), so the
// level a call sees before its own debit or credit bounds every level
// since the previous call. A history of (time, level seen) for every call
// answers the question exactly: the peak over (g, now] is the highest
// level seen by a call after g, or the level now if higher. The grant's
// own call, at g itself, is not counted: its level was seen before the
// debit.
//
// # What is kept
//
// Only entries that could be the answer: an entry is dropped once a later
// one is at least as high (every query that counts the earlier counts the
// later). So times rise and levels fall strictly along the history, and
// the answer for g is the level of the first entry after g. When more than
// Max entries remain, the two neighbours with the smallest drop between
// them are merged into one with the later time and the higher level: a
// query between them then gets the higher level, which credits less, never
// more. No entry is lost by merging, so the history covers all time: a
// bucket with an unknown past starts with one entry (now, at least Burst),
// so that nothing granted before now is credited.
//
// A credit c for tokens granted after g raises every entry after g by c:
// the bucket without those tokens granted was c higher since, and a later
// return must not use the same room below the cap again.
package peaks

import (
	"math"
	"strconv"
	"strings"
)

// Max is the most entries a history keeps.
const Max = 8

// Entry is one point of a history: at time T (µs), a level of at most L
// (tokens) since the previous entry's time.
type Entry struct {
	T int64
	L float64
}

// History is a bucket's level history. The zero value is empty: a bucket
// that has never been seen; Reset starts it. It is a value of fixed size,
// so a copy is a snapshot.
type History struct {
	n int
	e [Max + 1]Entry // e[:n]; one spare slot for Push before it merges
}

// Reset makes h the history of a bucket whose past before now is unknown:
// one entry (now, level), where level is at least the bucket's burst.
func (h *History) Reset(now int64, level float64) {
	h.n = 1
	h.e[0] = Entry{T: now, L: level}
}

// Entries returns h's entries, oldest first. The slice aliases h.
func (h *History) Entries() []Entry { return h.e[:h.n] }

// Len is the number of entries.
func (h *History) Len() int { return h.n }

// Push records a call at now (not before the last entry's time) that saw
// level l before its debit.
func (h *History) Push(now int64, l float64) {
	for h.n > 0 && h.e[h.n-1].L <= l {
		h.n-- // dominated by the new entry
	}
	if h.n > 0 && h.e[h.n-1].T >= now {
		return // an entry at the same time, higher: it covers l
	}
	h.e[h.n] = Entry{T: now, L: l}
	h.n++
	if h.n > Max {
		h.merge()
	}
}

// merge joins the neighbours with the smallest drop (the oldest pair on a
// tie) into one entry with the later time and the higher level.
func (h *History) merge() {
	best := 0
	for i := 1; i+1 < h.n; i++ {
		if h.e[i].L-h.e[i+1].L < h.e[best].L-h.e[best+1].L {
			best = i
		}
	}
	h.e[best+1].L = h.e[best].L
	copy(h.e[best:], h.e[best+1:h.n])
	h.n--
}

// Peak returns the highest level over (after, now], given x, the level
// now: the level of the first entry after after, or x if higher.
func (h *History) Peak(after int64, x float64) float64 {
	for i := 0; i < h.n; i++ {
		if h.e[i].T > after {
			return max(h.e[i].L, x)
		}
	}
	return x
}

// Raise adds c to every entry after after, then drops the entries that
// are no longer higher than a later one (those before the raised ones, and
// raised ones that rounding made equal).
func (h *History) Raise(after int64, c float64) {
	for i := h.n - 1; i >= 0 && h.e[i].T > after; i-- {
		h.e[i].L += c
	}
	// Keep, from the newest back, each entry above all later ones.
	k := h.n - 1
	for i := h.n - 2; i >= 0; i-- {
		if h.e[i].L > h.e[k].L {
			k--
			h.e[k] = h.e[i]
		}
	}
	if k > 0 {
		copy(h.e[:], h.e[k:h.n])
		h.n -= k
	}
}

// GrantTime returns the earliest time the returned tokens can have been
// granted, for a release at now with age ageUS (µs, an upper bound of
// now − the grant's time) and grant id (the low 32 bits of the oldest
// grant's time in µs, or 0 for unknown): with an id and an age below 2^32
// µs, the latest time up to now with those low bits, which is the grant's
// (whether or not the age is exact); else now − ageUS. In either case it
// is before now, since the grant was an earlier call on the bucket.
func GrantTime(now, ageUS int64, id uint32) int64 {
	g := now - ageUS
	if id != 0 && ageUS < 1<<32 {
		g = now - (now-int64(id))&(1<<32-1)
	}
	return min(g, now-1)
}

// Fields returns h's entries as the bucket's fields p1, p2, ... hold them:
// "t:l", the time as an integer and the level in the shortest form that
// reads back exactly (the scripts write %.17g, which reads back the same).
func (h *History) Fields() []string {
	f := make([]string, h.n)
	for i, e := range h.Entries() {
		f[i] = strconv.FormatInt(e.T, 10) + ":" + strconv.FormatFloat(e.L, 'g', -1, 64)
	}
	return f
}

// Parse reads the values of the fields p1, p2, ... of a bucket, up to the
// first missing one. It reports false for values that are not a valid
// history: none, more than Max, a malformed entry, times not rising, levels
// not falling, or a level that is not a finite number.
func Parse(fields []string) (History, bool) {
	var h History
	if len(fields) == 0 || len(fields) > Max {
		return h, false
	}
	for _, f := range fields {
		ts, ls, ok := strings.Cut(f, ":")
		if !ok {
			return History{}, false
		}
		t, err1 := strconv.ParseInt(ts, 10, 64)
		l, err2 := strconv.ParseFloat(ls, 64)
		if err1 != nil || err2 != nil || math.IsNaN(l) || math.IsInf(l, 0) {
			return History{}, false
		}
		if h.n > 0 && (t <= h.e[h.n-1].T || l >= h.e[h.n-1].L) {
			return History{}, false
		}
		h.e[h.n] = Entry{T: t, L: l}
		h.n++
	}
	return h, true
}
