package rateshare

import "math"

// Bucket is the store's side of a tenant: what a script would keep in the
// bucket's hash and change atomically in one call. Every method takes the
// store's clock (µs); a time before the bucket's is taken as the
// bucket's (no time passes), as the scripts treat a clock that goes back.
// The zero value is an empty bucket at time 0 with no share in force;
// NewBucket returns a full one. Its fields are exported to be read, as an
// inspection of the store would read them; only the methods change them.
// A Bucket is not safe for concurrent use: the store runs one call at a
// time.
type Bucket struct {
	Tokens float64 // whole and fractional tokens available at At
	At     int64   // the bucket's time, µs
	Epoch  int64   // the epoch of At: Committed's
	// Committed is S, the sum of the shares in force in Epoch, and
	// Booked the sum of those in force in the epoch after it, tokens/s.
	// Both follow from Shares; they are kept, as a script would keep them
	// in the bucket, so that a call reads two numbers, not every
	// instance's entry.
	Committed, Booked float64
	// Lost counts the tokens the bucket made while full, which it could
	// not hold. What was taken from the bucket, what it holds, what it
	// lost and what the shares made add up to Burst + Rate*T
	// (TestBoundProperty).
	Lost float64
	// Shares are the shares in force by instance, as the instance
	// registry's entries would hold them: a second grant to an instance
	// replaces its first, and a release of a share not in force releases
	// nothing, so no client's retry or mistake can leave S below what is
	// accruing.
	Shares map[string]Share
}

// NewBucket returns a full bucket at time now, no share in force.
func NewBucket(p Params, now int64) *Bucket {
	return &Bucket{Tokens: p.Burst, At: now, Epoch: p.EpochOf(now)}
}

// Share is a grant of a rate: Rate tokens a second from From until Until
// (µs): the end of the epoch it was granted in, or of the epoch after it
// when it was granted in the second half of its epoch (booked), so that
// every share lasts between half a Period and one and a half. The zero
// Share grants nothing.
type Share struct {
	Rate        float64
	From, Until int64
}

// advance refills b up to now, a piece per epoch: at Rate - Committed
// until the end of Epoch, then at Rate - Booked for the epoch after it,
// then at Rate. Within each piece the level only rises, so capping it at
// Burst at the piece's end is the same as capping it all along.
func (b *Bucket) advance(p Params, now int64) {
	for now > b.At {
		if b.Committed == 0 && b.Booked == 0 {
			// Nothing in force: one piece at Rate, however many epochs.
			b.fill(p, now, p.Rate)
			b.Epoch = p.EpochOf(now)
			return
		}
		end := p.EpochEnd(b.Epoch)
		if now < end {
			b.fill(p, now, p.Rate-b.Committed)
			return
		}
		b.fill(p, end, p.Rate-b.Committed)
		b.Epoch++
		b.Committed, b.Booked = b.Booked, 0
		for name, sh := range b.Shares {
			if sh.Until <= end {
				delete(b.Shares, name)
			}
		}
	}
}

// fill adds what rate makes from b.At to t (>= b.At), capped at Burst.
func (b *Bucket) fill(p Params, t int64, rate float64) {
	level := b.Tokens + max(rate, 0)*float64(t-b.At)/1e6
	b.Tokens = math.Min(p.Burst, level)
	b.Lost += level - b.Tokens
	b.At = t
}

// Level advances b to now, as any call does, and returns the tokens it
// holds then.
func (b *Bucket) Level(p Params, now int64) float64 {
	b.advance(p, now)
	return b.Tokens
}

// Take grants up to want whole tokens at now, as many as the bucket
// holds, and returns them. want <= 0 or NaN takes nothing.
func (b *Bucket) Take(p Params, now int64, want float64) float64 {
	b.advance(p, now)
	if !(want > 0) {
		return 0
	}
	g := math.Min(math.Floor(want), math.Floor(b.Tokens))
	if g <= 0 {
		return 0
	}
	b.Tokens -= g
	return g
}

// GrantShare grants instance a share of up to want tokens a second, from
// now to the end of the current epoch, or, in the epoch's second half, of
// the epoch after it, out of what the other shares in force leave of
// Rate*(1 - Headroom) in each epoch it covers. It replaces the share the
// instance held, if any (the holder starts its Lease again). It grants
// nothing (the zero Share, and the instance then holds none) when what is
// left could not hold one token (share*Hold < 1), or want <= 0 or NaN.
func (b *Bucket) GrantShare(p Params, now int64, instance string, want float64) Share {
	b.advance(p, now)
	b.drop(p, instance)
	if b.Committed == 0 && b.Booked == 0 {
		b.Epoch = p.EpochOf(b.At) // the zero Bucket's, or one idle since
	}
	end := p.EpochEnd(b.Epoch)
	booked := 2*(end-b.At) < micros(p.Period)
	// Booked is part of Committed (a share booked is also in force
	// now), so what Committed leaves is left in the next epoch too.
	s := math.Min(want, p.grantable()-b.Committed)
	if booked {
		end = p.EpochEnd(b.Epoch + 1)
	}
	if !(s > 0) || p.capOf(s) < 1 {
		return Share{}
	}
	sh := Share{Rate: s, From: b.At, Until: end}
	if b.Shares == nil {
		b.Shares = make(map[string]Share)
	}
	b.Shares[instance] = sh
	b.Committed += s
	if booked {
		b.Booked += s
	}
	return sh
}

// ReleaseShare ends instance's share sh at now, if it is the share the
// instance holds: from now on the bucket refills at that rate again. The
// holder stops accruing at now and drops what it has not spent
// (Lease.Release). A release of a share that ended, or was replaced (a
// release repeated, or one that arrives after a later grant), releases
// nothing. A share is named by its From: the bucket's time of its grant,
// which differs between two grants to one instance as long as Redis's
// clock moves on between its calls (a clock set back, after a failover to
// a replica behind, could repeat one, and a late release would then end
// the later share while its holder still accrues it, until its epoch
// ends).
func (b *Bucket) ReleaseShare(p Params, now int64, instance string, sh Share) {
	b.advance(p, now)
	if held, ok := b.Shares[instance]; ok && held.From == sh.From && sh.Rate > 0 {
		b.drop(p, instance)
	}
}

// drop takes instance's share, if any, out of those in force.
func (b *Bucket) drop(p Params, instance string) {
	sh, ok := b.Shares[instance]
	if !ok {
		return
	}
	delete(b.Shares, instance)
	// The sums are recomputed when no share is left, so that rounding
	// does not build up.
	if len(b.Shares) == 0 {
		b.Committed, b.Booked = 0, 0
		return
	}
	b.Committed = max(0, b.Committed-sh.Rate)
	if sh.Until > p.EpochEnd(b.Epoch) { // booked, and not yet in force

		b.Booked = max(0, b.Booked-sh.Rate)
	}
}

// ExpireAt returns the earliest time (µs) at which the store may drop the
// bucket's key: when no share is in force any more and the bucket has
// refilled to Burst. A key dropped then and made again, full, by the next
// call (NewBucket) is the bucket it replaced, so an expiry never makes a
// token; one dropped earlier would refill a bucket that shares still draw
// on, or one that was not full. A script would set the key's TTL to this
// time (plus the margin today's scripts keep).
func (b *Bucket) ExpireAt(p Params) int64 {
	c := *b
	c.Shares = nil // advance deletes from the map: the copy goes without it
	t := c.At
	if c.Committed > 0 || c.Booked > 0 {
		// The last share in force ends with the epoch after Epoch at the
		// latest (booked), or with Epoch's.
		t = p.EpochEnd(c.Epoch)
		if c.Booked > 0 {
			t = p.EpochEnd(c.Epoch + 1)
		}
		c.advance(p, t)
	}
	return t + int64(math.Ceil((p.Burst-c.Tokens)/p.Rate*1e6))
}
