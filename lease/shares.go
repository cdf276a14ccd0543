package lease

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate shares (the package doc, "Rate shares"; docs/design.md): a share
// is a grant of a rate, s tokens a second until the end of an epoch, which
// its holder accrues locally. A bucket records the sum of the shares in
// force and refills at the rest of the rate, so that the two together
// make exactly the rate and the bound holds. The functions here are the
// scripts' rules in Go, in their operations and order, which
// lease/memstore and the operator's view of a bucket call.

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

// check reports what of s is out of range (common.lua's read_bucket
// checks the same of field sh).
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
	t := s.Until()
	level, _ := RefillShares(tokens, at, t, rate, burst, s)
	return t, level
}

// Until returns when the last share that s has in force ends (µs): the
// end of its epoch, or of the next one when a part is booked into it.
// The instance registry is kept until then at least, so that the entries
// of instances holding shares, which call about once a period, outlive
// their window (acquire.lua's SHARES).
func (s Shares) Until() int64 {
	if s.Booked > 0 {
		return s.end(1)
	}
	return s.end(0)
}

// ShareOp is what an acquire does with the caller's rate share
// (Request.Share; see Rate shares in the package doc). A share needs the
// instance registry: a Client without WithInstance sends no operation.
type ShareOp uint8

const (
	// ShareKeep leaves the share the caller holds, if any, as it is: the
	// zero value, which sends nothing.
	ShareKeep ShareOp = iota
	// ShareAsk ends the share the caller holds, if any, and asks for one
	// on Request.ShareTerms: min(its max-min fair share, what the shares
	// in force leave of the rate less the headroom, and an even part of
	// that among ShareTerms.Instances), until the end of the
	// bucket's epoch, or of the next one in an epoch's second half. None
	// is granted while a client of an earlier release is active on the
	// tenant (its registry entry has three fields), nor one that could
	// not hold a token over Hold.
	ShareAsk
	// ShareEnd ends the share granted at Request.ShareFrom, if the caller
	// holds it still: a repeated or late end ends nothing.
	ShareEnd
)

// ShareTerms are the shape of the shares a client asks for (ShareAsk).
// They are sent in whole microseconds, rounded down.
type ShareTerms struct {
	// Period is the length of an epoch, Phase (in [0, Period)) offsets its
	// boundaries from Redis's clock's zero: a hash of the tenant, so that
	// the tenants of a fleet do not renew together. A bucket's epochs are
	// those of the terms its first share was granted on, while any share
	// is in force.
	Period, Phase time.Duration
	// Hold is how long the holder lets its share accrue unspent: a share
	// too small to hold a token over it (Rate*Hold < 1) is not granted. It
	// is the L of the window bound, Burst + Rate*(W + L). At least 1 ms.
	Hold time.Duration
	// Headroom, in [0, 1), is the part of the rate never granted as
	// shares: the bucket keeps refilling at least at Headroom*Rate, for
	// bursts and for instances that arrive while shares are in force.
	Headroom float64
	// Instances, when above 1, is how many instances the asker expects
	// to share the tenant: a share is then at most an even part of what
	// shares may take, Rate*(1-Headroom)/Instances, however few instances
	// the registry holds yet. Why: the instances of a fleet that start
	// together register one by one, and the first to ask were granted
	// shares sized among those registered so far (their demands' water
	// level), which left nothing for the last, refused until the first
	// renewed. 0 or 1: no such cap (the max-min fair share alone).
	Instances int
}

// MaxShareInstances is the most ShareTerms.Instances may be.
const MaxShareInstances = 1 << 20

// Validate returns an error wrapping ErrBadRequest that names the first
// field of t out of range, or nil.
func (t ShareTerms) Validate() error {
	p, ph, h := t.Period.Microseconds(), t.Phase.Microseconds(), t.Hold.Microseconds()
	switch {
	case p < 1000 || p > maxEpochTime/4:
		return fmt.Errorf("%w: ShareTerms.Period %v, want from 1ms to 2^51µs", ErrBadRequest, t.Period)
	case ph < 0 || ph >= p:
		return fmt.Errorf("%w: ShareTerms.Phase %v, want in [0, Period)", ErrBadRequest, t.Phase)
	case h < 1000:
		return fmt.Errorf("%w: ShareTerms.Hold %v, want at least 1ms", ErrBadRequest, t.Hold)
	case !(t.Headroom >= 0 && t.Headroom < 1):
		return fmt.Errorf("%w: ShareTerms.Headroom %v, want in [0, 1)", ErrBadRequest, t.Headroom)
	case t.Instances < 0 || t.Instances > MaxShareInstances:
		return fmt.Errorf("%w: ShareTerms.Instances %d, want 0 to %d", ErrBadRequest, t.Instances, MaxShareInstances)
	}
	return nil
}

// RateShare is a rate share held: Rate tokens a second from From until
// Until (the bucket's times, Redis's clock). The zero RateShare is none.
type RateShare struct {
	Rate        float64
	From, Until time.Time
}

// Held reports whether s is a share (Rate > 0).
func (s RateShare) Held() bool { return s.Rate > 0 }

// Equal reports whether s and o are the same share, to the microsecond
// (the store's unit), as their String would tell.
func (s RateShare) Equal(o RateShare) bool {
	return s.Rate == o.Rate && s.From.UnixMicro() == o.From.UnixMicro() && s.Until.UnixMicro() == o.Until.UnixMicro()
}

// String returns s as a registry entry's fourth field holds it,
// "rate/from/until" (µs), or "" for none.
func (s RateShare) String() string {
	if !s.Held() {
		return ""
	}
	return fmt.Sprintf("%.17g/%d/%d", s.Rate, s.From.UnixMicro(), s.Until.UnixMicro())
}

// parseRateShare reads a registry entry's fourth field: "" is none.
func parseRateShare(v string) (RateShare, error) {
	if v == "" {
		return RateShare{}, nil
	}
	// cutFields, not strings.Split: no slice to allocate on an
	// acquire's reply.
	var f [3]string
	if n := cutFields(v, "/", f[:]); n != len(f) {
		return RateShare{}, fmt.Errorf("share %q: want rate/from/until", v)
	}
	r, err1 := strconv.ParseFloat(f[0], 64)
	from, err2 := strconv.ParseInt(f[1], 10, 64)
	until, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || !(r > 0) || math.IsInf(r, 0) || until <= from {
		return RateShare{}, fmt.Errorf("share %q: want rate > 0, from < until", v)
	}
	return RateShare{Rate: r, From: time.UnixMicro(from), Until: time.UnixMicro(until)}, nil
}

// start returns when the epoch Epoch starts (µs).
func (s Shares) start() int64 { return s.Epoch*s.Period + s.Phase }

// Holds reports whether r, a share an instance's entry records, is among
// the shares s has in force at now (the bucket's time): it runs past now
// and past the start of s's epoch. Why past now: a share granted under
// other epochs (another period or phase) may end after the start of the
// record's epoch and before now; counted in force, an ask or end of its
// instance took it out of a record built after it ended, which wiped
// another instance's commitment out (1.5 times Burst + Rate·T issued in a
// helper's test, TestExpiredShareOfOtherEpochsIsNotInForce). And not past
// the end of the epoch after s's (s.end(1)), by which every share granted
// ends: an entry no call writes (until 2^53 µs) is not one s holds, as
// acquire.lua's in_record (TestShareNoRecordHoldsIsDropped).
func (s Shares) Holds(r RateShare, now time.Time) bool {
	u := r.Until.UnixMicro()
	return s.InForce() && r.Held() && u > s.start() && r.Until.After(now) && u <= s.end(1)
}

// Drop returns s without r, a share it holds (Holds): out of Committed,
// and out of Booked when r runs past s's epoch; the zero Shares when
// nothing is left in force. It is acquire.lua's, in its operations and
// order.
func (s Shares) Drop(r RateShare) Shares {
	sc, sb := s.Committed-r.Rate, s.Booked
	if r.Until.UnixMicro() > s.end(0) {
		sb -= r.Rate
	}
	sc, sb = max(sc, 0), max(sb, 0)
	if sb > sc {
		sb = sc
	}
	if sc <= 0 {
		return Shares{}
	}
	s.Committed, s.Booked = sc, sb
	return s
}

// GrantShare returns s with a share granted at now (µs, the bucket's time
// of the call, in s's epoch) on terms t, and the share: min(fair, what s
// leaves of rate*(1 - t.Headroom), and rate*(1 - t.Headroom)/t.Instances
// when t.Instances is above 1), until the end of s's epoch, or of the
// next one when granted in its second half (then booked too); none (the
// zero RateShare, and s unchanged) when that could not hold a token over
// t.Hold. Without shares in force s takes the epochs of t. It is
// acquire.lua's, in its operations and order.
func GrantShare(s Shares, now int64, t ShareTerms, rate, fair float64) (Shares, RateShare) {
	if !s.InForce() {
		per, ph := t.Period.Microseconds(), t.Phase.Microseconds()
		ep := (now - ph) / per
		if (now-ph)%per < 0 {
			ep-- // floor, not truncation
		}
		s = Shares{Epoch: ep, Period: per, Phase: ph}
	}
	fin := s.end(0)
	sr := rate*(1-t.Headroom) - s.Committed
	if fair < sr {
		sr = fair
	}
	if t.Instances > 1 {
		if even := rate * (1 - t.Headroom) / float64(t.Instances); sr > even {
			sr = even
		}
	}
	if sr > 0 && sr*float64(t.Hold.Microseconds())/1e6 >= 1 {
		until := fin
		if 2*(fin-now) < s.Period {
			until = fin + s.Period
			s.Booked += sr
		}
		s.Committed += sr
		return s, RateShare{Rate: sr, From: time.UnixMicro(now), Until: time.UnixMicro(until)}
	}
	if s.Committed <= 0 {
		return Shares{}, RateShare{}
	}
	return s, RateShare{}
}
