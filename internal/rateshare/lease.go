package rateshare

import "math"

// Lease is an instance's side of a share: what it has accrued and not
// spent. The zero Lease holds nothing. Like Bucket, it takes time as a
// parameter (the instance's view of the store's clock) and is not safe for
// concurrent use.
type Lease struct {
	Share   Share
	Accrued float64 // tokens accrued and not spent, at most Share.Rate*Hold
	At      int64   // accrued up to
	// Lost counts the tokens the shares made that the lease did not
	// hold (past Share.Rate*Hold) or dropped unspent (when a share
	// ended, was released or replaced).
	Lost float64
}

// Start starts accruing sh, the reply at now of a GrantShare, replacing
// the share held: what that had accrued and not spent is dropped (the
// grant replaced it in the bucket). A zero sh (nothing granted) leaves the
// lease with no share.
func (l *Lease) Start(p Params, now int64, sh Share) {
	if sh.Rate > 0 {
		now = sh.From
	}
	l.end(p, now)
	l.Share, l.At = sh, now
}

// Release ends the share at now, dropping what was not spent, and returns
// it for the bucket's ReleaseShare, which makes its rate the bucket's
// again.
func (l *Lease) Release(p Params, now int64) Share {
	sh := l.Share
	l.end(p, now)
	return sh
}

// end accrues up to now and drops the share and what it holds.
func (l *Lease) end(p Params, now int64) {
	l.accrue(p, now)
	l.Lost += l.Accrued
	l.Share, l.Accrued = Share{}, 0
}

// accrue adds what the share made from l.At to now, within the share's
// time, capped at its Hold; once the share ended, it drops what is left.
func (l *Lease) accrue(p Params, now int64) {
	if t := min(now, l.Share.Until); t > l.At {
		made := l.Accrued + l.Share.Rate*float64(t-l.At)/1e6
		l.Accrued = math.Min(p.capOf(l.Share.Rate), made)
		l.Lost += made - l.Accrued
		l.At = t
	}
	if now >= l.Share.Until && l.Share.Rate > 0 {
		l.Lost += l.Accrued
		l.Share, l.Accrued = Share{}, 0
	}
}

// Spend spends n whole tokens of the share at now if it has accrued them.
func (l *Lease) Spend(p Params, now int64, n float64) bool {
	l.accrue(p, now)
	if !(n > 0) || l.Accrued < n {
		return false
	}
	l.Accrued -= n
	return true
}

// Active reports whether a share is in force at now.
func (l *Lease) Active(now int64) bool { return l.Share.Rate > 0 && now < l.Share.Until }
