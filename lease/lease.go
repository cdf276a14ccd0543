package lease

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrBadRequest is returned (wrapped, naming the field) for an invalid rate,
// burst, want or amount. Such requests are never sent to Redis.
var ErrBadRequest = errors.New("lease: bad request")

// ErrBadReply is returned (wrapped) when Redis answers a script call with a
// reply of an unexpected shape, e.g. because another script was loaded under
// the same digest or a proxy mangled the reply.
var ErrBadReply = errors.New("lease: unexpected script reply")

// Bounds of Limits. They keep every quantity the scripts compute exactly
// representable in a float64 (2^40 tokens with microsecond-scale fractions)
// and every TTL within what PEXPIRE accepts.
const (
	MaxRate  = 1e12    // tokens per second
	MaxBurst = 1 << 40 // tokens
)

// Limits are a tenant's global bucket: Burst tokens of capacity, refilled at
// Rate tokens per second.
type Limits struct {
	Rate  float64 // tokens added per second; finite, > 0, <= MaxRate
	Burst int64   // capacity in tokens; 1..MaxBurst
}

// Validate reports whether l can be sent to Redis (see Check). Errors wrap
// ErrBadRequest and name the field.
func (l Limits) Validate() error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return nil
}

// Check returns why l is not a bucket the scripts can keep, naming the
// field, or nil: Rate must be finite, > 0 and <= MaxRate; Burst must be in
// 1..MaxBurst. It is the one statement of that rule: its error wraps no
// sentinel and has no package prefix, so that each caller wraps it in its
// own (Validate in ErrBadRequest, package quota in its ErrInvalid).
func (l Limits) Check() error {
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate <= 0 || l.Rate > MaxRate {
		//lint:ignore ST1005 the message starts with the field's name, as callers print it after their prefix
		return fmt.Errorf("Rate is %v, want a finite number in (0, %g]", l.Rate, float64(MaxRate))
	}
	if l.Burst < 1 || l.Burst > MaxBurst {
		//lint:ignore ST1005 the message starts with the field's name, as callers print it after their prefix
		return fmt.Errorf("Burst is %d, want 1..%d", l.Burst, int64(MaxBurst))
	}
	return nil
}

// formatRate writes rate so that Lua's tonumber reads back the same
// float64: the shortest decimal that round-trips, without an exponent
// (some Lua implementations, like the one in miniredis, read "1e+06" as
// an invalid integer).
func formatRate(rate float64) string {
	return strconv.FormatFloat(rate, 'f', -1, 64)
}

// appendRate appends rate to dst as formatRate writes it.
func appendRate(dst []byte, rate float64) []byte {
	return strconv.AppendFloat(dst, rate, 'f', -1, 64)
}
