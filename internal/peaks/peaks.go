// Package peaks is the Go model of the level history that the lease
// scripts keep in each bucket (the hash field h, see lease/common.lua),
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
	"encoding/binary"
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
// one entry (now, level), where level is at least the bucket's burst
// (rounded up to the grid, Round, as every level).
func (h *History) Reset(now int64, level float64) {
	h.n = 1
	h.e[0] = Entry{T: now, L: Round(level)}
}

// Entries returns h's entries, oldest first. The slice aliases h.
func (h *History) Entries() []Entry { return h.e[:h.n] }

// Len is the number of entries.
func (h *History) Len() int { return h.n }

// Push records a call at now (not before the last entry's time) that saw
// level l before its debit, rounded up to the grid (Round), and reports
// whether that merged two entries.
func (h *History) Push(now int64, l float64) (merged bool) {
	h.n = len(push(h.e[:h.n], now, Round(l))) // within the spare slot
	if h.n > Max {
		h.merge()
		return true
	}
	return false
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
func (h *History) Peak(after int64, x float64) float64 { return peak(h.Entries(), after, x) }

// Raise adds c to every entry after after, rounding the sums up to the
// grid (Round), then drops the entries that are no longer higher than a later
// one (those before the raised ones, and raised ones that rounding made
// equal).
func (h *History) Raise(after int64, c float64) { h.n = len(raise(h.Entries(), after, c, true)) }

// Unmerged is a history that never merges: entries are dropped only when
// a later one is as high, so it answers every Peak exactly however long
// it grows. The scripts keep a History; the simulation keeps an Unmerged
// beside it to measure what the merges cost. The zero value is empty.
type Unmerged struct {
	e []Entry
}

// Reset is History.Reset.
func (u *Unmerged) Reset(now int64, level float64) { u.e = append(u.e[:0], Entry{T: now, L: level}) }

// Push is History.Push, without the merge and the rounding.
func (u *Unmerged) Push(now int64, l float64) { u.e = push(u.e, now, l) }

// Peak is History.Peak.
func (u *Unmerged) Peak(after int64, x float64) float64 { return peak(u.e, after, x) }

// Raise is History.Raise, without the rounding.
func (u *Unmerged) Raise(after int64, c float64) { u.e = raise(u.e, after, c, false) }

// push drops the entries of e that level l at now dominates and appends
// (now, l) unless an entry at the same time remains (it is higher).
func push(e []Entry, now int64, l float64) []Entry {
	for len(e) > 0 && e[len(e)-1].L <= l {
		e = e[:len(e)-1]
	}
	if len(e) > 0 && e[len(e)-1].T >= now {
		return e
	}
	return append(e, Entry{T: now, L: l})
}

// peak is the level of the first entry of e after after, or x if higher.
func peak(e []Entry, after int64, x float64) float64 {
	for _, en := range e {
		if en.T > after {
			return max(en.L, x)
		}
	}
	return x
}

// raise adds c to the entries of e after after (rounded up to the grid
// with round) and keeps, in place, each entry above all later ones.
func raise(e []Entry, after int64, c float64, round bool) []Entry {
	for i := len(e) - 1; i >= 0 && e[i].T > after; i-- {
		e[i].L += c
		if round {
			e[i].L = Round(e[i].L)
		}
	}
	if len(e) == 0 {
		return e
	}
	k := len(e) - 1 // e[k:] is kept, built from the newest back
	for i := len(e) - 2; i >= 0; i-- {
		if e[i].L > e[k].L {
			k--
			e[k] = e[i]
		}
	}
	return e[:copy(e, e[k:])]
}

// GrantTime returns the earliest time the returned tokens can have been
// granted, for a release at the bucket's time now, when Redis's clock
// reads clock (at most now: a bucket's time runs ahead of the clock while
// its refill is reserved), with age ageUS (µs, an upper bound of clock −
// the grant's time, as the client measures it against Redis's clock) and
// grant id (the low 32 bits of the oldest grant's time in µs, the bucket's
// time then, or 0 for unknown): with an id, when clock − ageUS (the
// earliest time the age allows for the grant) is less than 2^32 µs before
// now, the latest time up to now with those low bits, which is the
// grant's (whether or not the age is exact); else clock − ageUS, not now − ageUS:
// the grant was made at the bucket's time then, which is no earlier than
// the clock then, and counting the age back from a bucket's time ahead of
// the clock would put the grant after calls that followed it, leaving
// their levels out of the credit's peak (credited more than owed). In
// either case it is before now, since the grant was an earlier call on
// the bucket.
func GrantTime(now, clock, ageUS int64, id uint32) int64 {
	g := min(clock, now) - ageUS
	// now - g, not the age alone: now runs ahead of the clock on a frozen
	// bucket, and a grant 2^32 µs or more before now would be taken for
	// one 2^32 µs later, the levels between left out of the peak.
	if id != 0 && now-g < 1<<32 {
		g = now - (now-int64(id))&(1<<32-1)
	}
	return min(g, now-1)
}

// Fields returns h's entries as the previous release's fields p1, p2, ...
// held them:
// "t:l", the time as an integer and the level in the shortest form that
// reads back exactly (the scripts write %.17g, which reads back the same).
func (h *History) Fields() []string {
	f := make([]string, h.n)
	for i, e := range h.Entries() {
		f[i] = strconv.FormatInt(e.T, 10) + ":" + strconv.FormatFloat(e.L, 'g', -1, 64)
	}
	return f
}

// Parse reads the values of the previous release's fields p1, p2, ... of a
// bucket (levels as stored, not rounded), up to the
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

// MaxBytes is the most bytes a packed history takes (Pack merges entries
// until it fits): Redis keeps a hash whose values are at most 64 bytes in
// its compact encoding (hash-max-listpack-value).
const MaxBytes = 64

// Round returns the grid value that level l rounds up to: l itself when
// it is on the grid, which is 0, the whole numbers from 128 up, and below
// 128 the numbers of 8 significant bits, (128 + j)·2^(e-8) for j in
// 0..127 (steps of at most a 128th of the level), down to 2^-30, which
// every level below rounds up to. A level rounded up only credits a later
// return less (see lease/common.lua).
func Round(l float64) float64 { return Level(Code(l)) }

// Code returns the code of Round(l): 0 for 0 (and below), ceil(l) + 4609
// from 128 up, and below 128 1 + 128(e + 29) + j for (128 + j)·2^(e-8),
// l in [2^(e-1), 2^e); 1 for l below 2^-30. Codes rise with the levels,
// and the history packs levels as their codes.
func Code(l float64) int64 {
	if l <= 0 {
		return 0
	}
	if l >= 128 {
		return int64(math.Ceil(l)) + 4609
	}
	_, e := math.Frexp(l)
	if e < -29 {
		return 1
	}
	return int64(e+29)*128 + int64(math.Ceil(math.Ldexp(l, 8-e))) - 127
}

// Level is the level of code c (Code).
func Level(c int64) float64 {
	if c <= 0 {
		return 0
	}
	if c >= 4737 {
		return float64(c - 4609)
	}
	oct := (c - 1) / 128
	return math.Ldexp(float64(c-1-oct*128+128), int(oct)-37)
}

// Limit is the least burst, or oldest level, whose history is not kept
// (Pack): 2^52, so that every number packed is below 2^53 and exact.
const Limit = 1 << 52

// Pack returns h as the bucket's field h holds it, for a bucket whose ts
// is ts (at or after every entry's time) and whose history is recorded
// under burst; h's levels are on the grid (Push, Raise and Reset round
// them up). The numbers, each a base-128 varint (7 bits a byte, low
// first, the high bit set on all but a number's last byte), are burst; z,
// the oldest level's code c1 = Code(l1) zigzagged against cb =
// Code(burst): 2(cb - c1), or 2(c1 - cb) - 1 when l1 is above burst; the
// drops c(i-1) - ci of the codes of the entries after the first; the gaps
// t(i+1) - ti between the entries; and ts - tn, the newest entry's
// distance to ts.
// Beyond MaxBytes it merges h's neighbours with the smallest drop, as Push
// does, until the packing fits (one entry always does). It reports false
// (h unchanged) when burst or the oldest level is Limit or more: such a
// history is not kept, and the next call finds an unknown past.
func (h *History) Pack(ts, burst int64) (string, bool) {
	if h.n == 0 || burst >= Limit || h.e[0].L >= Limit {
		return "", false
	}
	for {
		b := make([]byte, 0, 2*binary.MaxVarintLen64*(h.n+1))
		b = binary.AppendUvarint(b, uint64(burst))
		cb, c := Code(float64(burst)), Code(h.e[0].L)
		if c <= cb {
			b = binary.AppendUvarint(b, uint64(2*(cb-c)))
		} else {
			b = binary.AppendUvarint(b, uint64(2*(c-cb)-1))
		}
		for i := 1; i < h.n; i++ {
			ci := Code(h.e[i].L)
			b = binary.AppendUvarint(b, uint64(c-ci))
			c = ci
		}
		for i := 0; i+1 < h.n; i++ {
			b = binary.AppendUvarint(b, uint64(h.e[i+1].T-h.e[i].T))
		}
		b = binary.AppendUvarint(b, uint64(ts-h.e[h.n-1].T))
		if len(b) <= MaxBytes || h.n == 1 {
			return string(b), true
		}
		h.merge()
	}
}

// Unpack reads the field h of a bucket whose ts is ts: the history and
// the burst it was recorded under. It reports false for a value that is
// not one Pack could have written: not a list of 2n + 1 varints below 2^53
// with 1 <= n <= Max, a drop or a gap below 1, or a level below 0.
func Unpack(v string, ts int64) (History, int64, bool) {
	var nums []int64
	for b := []byte(v); len(b) > 0; {
		x, k := binary.Uvarint(b)
		if k <= 0 || k > 8 || x >= 1<<53 {
			return History{}, 0, false
		}
		nums = append(nums, int64(x))
		b = b[k:]
	}
	n := (len(nums) - 1) / 2
	if len(nums)%2 == 0 || n < 1 || n > Max {
		return History{}, 0, false
	}
	burst, z := nums[0], nums[1]
	c := Code(float64(burst)) - z/2
	if z%2 == 1 {
		c = Code(float64(burst)) + (z+1)/2
	}
	var h History
	h.n = n
	h.e[0].L = Level(c)
	for i := 1; i < n; i++ {
		if nums[i+1] < 1 {
			return History{}, 0, false
		}
		c -= nums[i+1]
		h.e[i].L = Level(c)
	}
	if c < 0 {
		return History{}, 0, false
	}
	t := ts - nums[2*n]
	h.e[n-1].T = t
	for i := n - 2; i >= 0; i-- {
		gap := nums[n+1+i]
		if gap < 1 {
			return History{}, 0, false
		}
		t -= gap
		h.e[i].T = t
	}
	return h, burst, true
}
