package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// maxBatches bounds the ledger's memory per tenant. When more batches are
// held, the two oldest merge under the earlier grant time: a merged batch
// expires early, never late, so the lease lifetime bound still holds, and
// its age is overstated, never understated, so a return of it is credited
// no more than it should be. A busy tenant holds about two (the expiring
// lease and its replacement).
const maxBatches = 3

// Ledger tracks which of a tenant's leased tokens were granted when, so
// that tokens older than the lease TTL can be taken back, and a return of
// tokens can say how old they are. Tokens are fungible, so spends are
// attributed to the oldest batch first (FIFO): this is the order that keeps
// every spent token within its lifetime.
//
// A batch expires ttl after it was granted, with the ttl the caller passes
// at the time: when a tenant's lease TTL changes, the batches it holds take
// the new one.
//
// Total is what the syncer believes the counter holds. Requests only ever
// lower the counter, and the syncer is the only writer that raises it, so
// Total is always >= the counter and Sync can attribute the difference.
//
// The ledger is small on purpose (there is one per tenant): grant times are
// whole milliseconds after a base time, rounded down (so a batch looks
// older than it is, never younger), and a batch is in use while it holds
// tokens.
type Ledger struct {
	base  int64             // unix nanoseconds; the times below are ms after it
	left  [maxBatches]int64 // tokens of each batch, oldest first; 0 ends the list
	stamp [maxBatches]stamp // grant time of each batch
	// id is the GrantID of the oldest grant in each batch (zero when
	// unknown), for the return of its tokens to name (see
	// lease.ReleaseRequest.Grant).
	id [maxBatches]lease.GrantID
}

// stamp is a time in whole milliseconds after a Ledger's base.
type stamp int32

// Bounds of a stamp: times further from the base are rebased (see
// Ledger.rebase), and times that cannot be are clamped.
const (
	stampMin = stamp(math.MinInt32 + 1)
	stampMax = stamp(math.MaxInt32)
	// rebaseAfter is how far from its base a State's clock may run before
	// its stamps are moved to a new base: half the range, so that stamps in
	// the future (expiries, schedules: at most a day ahead) still fit.
	rebaseAfter = int64(math.MaxInt32/2) * int64(time.Millisecond)
)

// stampOf returns ns (unix nanoseconds) as a stamp, rounded down and
// clamped into range.
func (l *Ledger) stampOf(ns int64) stamp {
	d := ns - l.base
	ms := d / int64(time.Millisecond)
	if d < 0 && d%int64(time.Millisecond) != 0 {
		ms-- // round toward the past
	}
	return stamp(min(max(ms, int64(stampMin)), int64(stampMax)))
}

// stampCeil returns ns as a stamp, rounded up (for times that must not
// come early) and clamped into range.
func (l *Ledger) stampCeil(ns int64) stamp {
	s := l.stampOf(ns)
	if l.at(s) < ns && s < stampMax {
		s++
	}
	return s
}

// at returns the unix nanoseconds of s.
func (l *Ledger) at(s stamp) int64 { return l.base + int64(s)*int64(time.Millisecond) }

// init sets the base on first use (a zero ledger has none).
func (l *Ledger) init(ns int64) {
	if l.base == 0 {
		l.base = ns
	}
}

// n returns the number of batches in use.
func (l *Ledger) n() int {
	i := 0
	for i < maxBatches && l.left[i] > 0 {
		i++
	}
	return i
}

// Total returns the tokens the ledger accounts for.
func (l *Ledger) Total() (total int64) {
	for _, x := range l.left {
		total += x
	}
	return total
}

// Sync brings the ledger down to level, the counter's current value, and
// returns the tokens spent since the last call (attributed oldest first).
func (l *Ledger) Sync(level int64) (spent int64) {
	total := l.Total()
	if level >= total {
		return 0
	}
	spent = total - level
	rest := spent
	for l.left[0] > 0 && rest > 0 {
		if l.left[0] > rest {
			l.left[0] -= rest
			break
		}
		rest -= l.left[0]
		l.shift()
	}
	return spent
}

// expiresAt returns the unix nanoseconds at which batch i expires.
func (l *Ledger) expiresAt(i int, ttl time.Duration) int64 {
	return l.at(l.stamp[i]) + int64(ttl)
}

// Expire removes the batches whose time has come (granted ttl or more
// before now) and returns their tokens, the grant time of the oldest of
// them (the zero time when none expired) and the ID of their oldest grant
// (zero when unknown): the caller takes the tokens back from the counter.
func (l *Ledger) Expire(now time.Time, ttl time.Duration) (tokens int64, granted time.Time, id lease.GrantID) {
	ns := now.UnixNano()
	for l.left[0] > 0 && ns >= l.expiresAt(0, ttl) {
		if tokens == 0 {
			granted, id = time.Unix(0, l.at(l.stamp[0])), l.id[0]
		}
		tokens += l.left[0]
		l.shift()
	}
	return tokens, granted, id
}

// Add records tokens granted at time granted by the grant with ID id (zero
// for unknown). Batches are kept in order of grant, whatever the order they
// are added in (a round that read the clock before an urgent refill may
// apply its grant after it).
func (l *Ledger) Add(granted time.Time, tokens int64, id lease.GrantID) {
	if tokens <= 0 {
		return
	}
	l.init(granted.UnixNano())
	n := l.n()
	if n == maxBatches {
		// Merge the two oldest under the earlier grant time (the first's),
		// and the ID of the first's oldest grant.
		l.left[1] += l.left[0]
		l.stamp[1], l.id[1] = l.stamp[0], l.id[0]
		l.shift()
		n--
	}
	s := l.stampOf(granted.UnixNano())
	i := n
	for i > 0 && l.stamp[i-1] > s {
		l.left[i], l.stamp[i], l.id[i] = l.left[i-1], l.stamp[i-1], l.id[i-1]
		i--
	}
	l.left[i], l.stamp[i], l.id[i] = tokens, s, id
}

// ExpiringBefore returns the tokens in batches that expire before t, given
// the lease TTL ttl.
func (l *Ledger) ExpiringBefore(t time.Time, ttl time.Duration) (tokens int64) {
	ns := t.UnixNano()
	for i := 0; i < maxBatches && l.left[i] > 0 && l.expiresAt(i, ttl) < ns; i++ {
		tokens += l.left[i]
	}
	return tokens
}

// Clear forgets every batch (the counter was drained) and returns the
// tokens it accounted for, the grant time of the oldest batch (the zero
// time for none) and the ID of its oldest grant (zero when unknown).
func (l *Ledger) Clear() (tokens int64, oldest time.Time, id lease.GrantID) {
	tokens = l.Total()
	if tokens > 0 {
		oldest, id = time.Unix(0, l.at(l.stamp[0])), l.id[0]
	}
	l.left = [maxBatches]int64{}
	l.stamp = [maxBatches]stamp{}
	l.id = [maxBatches]lease.GrantID{}
	return tokens, oldest, id
}

// NextExpiry returns when the oldest batch expires, given the lease TTL
// ttl, and false when the ledger is empty.
func (l *Ledger) NextExpiry(ttl time.Duration) (time.Time, bool) {
	if l.left[0] == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, l.expiresAt(0, ttl)), true
}

// shift drops the oldest batch.
func (l *Ledger) shift() {
	copy(l.left[:], l.left[1:])
	copy(l.stamp[:], l.stamp[1:])
	copy(l.id[:], l.id[1:])
	l.left[maxBatches-1], l.stamp[maxBatches-1], l.id[maxBatches-1] = 0, 0, 0
}

// rebaseTo moves the base to ns, keeping every stamp's time (clamping
// those too far in the past). It returns the shift, in stamps, that the
// owner applies to stamps of its own.
func (l *Ledger) rebaseTo(ns int64) (shift int64) {
	shift = (ns - l.base) / int64(time.Millisecond)
	l.base += shift * int64(time.Millisecond)
	for i := range l.stamp {
		if l.left[i] > 0 {
			l.stamp[i] = shiftStamp(l.stamp[i], shift)
		}
	}
	return shift
}

// shiftStamp returns s moved back by shift, clamped at stampMin.
func shiftStamp(s stamp, shift int64) stamp {
	return stamp(max(int64(s)-shift, int64(stampMin)))
}
