package leasequota

// MaxTurnsWithoutWait is the most turns any one decision of l took in its
// slow path without waiting in between (see decide): 1 for a decision
// made at once, and never more than a few, or the path spun.
func MaxTurnsWithoutWait(l *Limiter) int64 { return l.turns.max.Load() }
