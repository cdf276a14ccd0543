package lease

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate shares (docs/design.md, "Rate shares"): a share is a grant of a
// rate, s tokens a second until the end of an epoch, which its holder
// accrues locally. A bucket records the sum of the shares in force and
// refills at the rest of the rate, so that the two together make exactly
// the rate and the bound holds. This release's scripts honour such a
// record (field sh) in every refill and in the key's TTL, and write none:
// the step that grants shares needs every client of a fleet to honour
// them first.

// ErrBadShares is returned, wrapped, by ParseShares for a field that does
// not read as Shares.
var ErrBadShares = errors.New("lease: bad shares field")

// Shares is what a bucket records of the rate shares in force (field sh,
// "epoch:committed:booked:period:phase"): the epoch of the bucket's time
// ts, the sum of the shares in force in it (Committed, tokens a second),
// the part of that sum still in force in the epoch after it (Booked: a
// share granted in an epoch's second half runs to the end of the next),
// and the epochs the shares were granted under: epoch e is [e*Period +
// Phase, (e+1)*Period + Phase) in Redis's clock (µs). The zero Shares
// holds none in force.
type Shares struct {
	Epoch             int64
	Committed, Booked float64 // tokens a second; 0 <= Booked <= Committed
	Period, Phase     int64   // µs; Period >= 1000, 0 <= Phase < Period
}

// InForce reports whether any share is in force.
func (s Shares) InForce() bool { return s.Committed > 0 || s.Booked > 0 }

// end returns when the epoch Epoch+k ends (µs).
func (s Shares) end(k int64) int64 { return (s.Epoch+k+1)*s.Period + s.Phase }

// String returns s as field sh holds it.
func (s Shares) String() string {
	return fmt.Sprintf("%d:%.17g:%.17g:%d:%d", s.Epoch, s.Committed, s.Booked, s.Period, s.Phase)
}

// ParseShares reads field sh, as common.lua's read_bucket does: an error
// wrapping ErrBadShares for one that does not hold five numbers in range
// (the scripts report such a bucket as corrupt).
func ParseShares(v string) (Shares, error) {
	f := strings.Split(v, ":")
	if len(f) != 5 {
		return Shares{}, fmt.Errorf("%w: %q, want epoch:committed:booked:period:phase", ErrBadShares, v)
	}
	var s Shares
	var errs [5]error
	s.Epoch, errs[0] = strconv.ParseInt(f[0], 10, 64)
	s.Committed, errs[1] = strconv.ParseFloat(f[1], 64)
	s.Booked, errs[2] = strconv.ParseFloat(f[2], 64)
	s.Period, errs[3] = strconv.ParseInt(f[3], 10, 64)
	s.Phase, errs[4] = strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return Shares{}, fmt.Errorf("%w: %q: %w", ErrBadShares, v, err)
	}
	if err := s.check(); err != nil {
		return Shares{}, fmt.Errorf("%w: %q: %w", ErrBadShares, v, err)
	}
	return s, nil
}

// Validate returns an error wrapping ErrBadShares that names the first
// field of s out of range (one the scripts would find corrupt), or nil.
func (s Shares) Validate() error {
	if err := s.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadShares, err)
	}
	return nil
}

// maxEpochTime bounds the epochs' times: (|Epoch|+2)*Period stays within
// 2^53 µs (285 years), so that the scripts, whose numbers are doubles,
// compute every boundary exactly.
const maxEpochTime = 1 << 53

// check reports what of s is out of range (common.lua's read_shares
// checks the same).
func (s Shares) check() error {
	switch {
	case !(s.Committed >= 0) || math.IsInf(s.Committed, 0):
		return fmt.Errorf("committed %v, want a finite number >= 0", s.Committed)
	case !(s.Booked >= 0) || s.Booked > s.Committed:
		return fmt.Errorf("booked %v, want in [0, committed]", s.Booked)
	case s.Period < 1000 || s.Period > maxEpochTime:
		return fmt.Errorf("period %d µs, want in [1000, 2^53]", s.Period)
	case s.Phase < 0 || s.Phase >= s.Period:
		return fmt.Errorf("phase %d µs, want in [0, period)", s.Phase)
	case s.Epoch > maxEpochTime/s.Period-2 || s.Epoch < -(maxEpochTime/s.Period-2):
		return fmt.Errorf("epoch %d, want its times within 2^53 µs", s.Epoch)
	}
	return nil
}

// RefillShares returns the level of a bucket that held tokens at from
// (µs), refilled up to burst as of to (no earlier than from), and the
// shares in force then: at rate less the shares in force in each epoch,
// piece by piece (never below 0 a second), and at rate once none is (the
// zero Shares: Refill). A share ends with its epoch: at an epoch's end
// the booked part is all that stays in force. It is common.lua's
// refill_shares in Go, in the script's operations and their order, so
// that its float64s are the script's. It takes at most three pieces,
// whatever the time between.
func RefillShares(tokens float64, from, to int64, rate float64, burst int64, s Shares) (float64, Shares) {
	for {
		if !s.InForce() {
			if to > from {
				tokens = Refill(tokens, from, to, rate, burst)
			}
			return tokens, Shares{}
		}
		left := max(rate-s.Committed, 0)
		end := s.end(0)
		if to < end {
			if to > from {
				tokens = Refill(tokens, from, to, left, burst)
			}
			return tokens, s
		}
		// A record from before the bucket's time (a client that does not
		// honour shares wrote the bucket since) refills nothing for the
		// time it missed: that client refilled at the whole rate already.
		if end > from {
			tokens = Refill(tokens, from, end, left, burst)
			from = end
		}
		s.Epoch++
		s.Committed, s.Booked = s.Booked, 0
	}
}

// Settled returns when a bucket that holds tokens at its time at (µs),
// with shares s in force then, has no share in force any more (at, when
// none is), and its level then: from that time on it refills at the
// whole rate. The scripts keep the key until it would then be full again
// (plus a second): a missing key is a full bucket with no share in
// force, so an expiry changes nothing.
func Settled(tokens float64, at int64, rate float64, burst int64, s Shares) (int64, float64) {
	if !s.InForce() {
		return at, tokens
	}
	t := s.end(0)
	if s.Booked > 0 {
		t = s.end(1)
	}
	level, _ := RefillShares(tokens, at, t, rate, burst, s)
	return t, level
}
