package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// maxBatches bounds the ledger's memory per tenant. When more batches are
// held, the two oldest merge under the earlier stamp and the older of their
// grants (see Ledger): a merged batch expires early, never late, so the
// lease lifetime bound still holds, and its age is overstated, never
// understated, so a return of it is credited no more than it should be. A
// busy tenant holds about two (the expiring lease and its replacement).
const maxBatches = 3

// Ledger tracks which of a tenant's leased tokens were granted when, so
// that tokens older than the lease TTL can be taken back, and a return of
// tokens can say how old they are. Tokens are fungible, so spends are
// attributed to the oldest batch first (FIFO): this is the order that keeps
// every spent token within its lifetime.
//
// A batch has two times. Its stamp is a local time no later than Redis
// ran the lease call: the call's plan, or the run as the server's clock
// dates it (serverClock). The batch expires ttl after it, and a return's
// age is measured from it, so it must never be later than the grant. Its ID (lease.GrantID) is the grant's Redis time: a return names
// it, and Redis credits the returned tokens only against the bucket's
// levels after that grant, so the ID a return names must never be of a
// grant later than the oldest one whose tokens it returns (naming a later
// grant over-credits).
//
// Batches are kept in the order of their grants in Redis, oldest first,
// whatever the order they are added in: a round reads its clock before it
// walks the tenants, so an urgent refill that runs while it walks gets a
// later stamp but an earlier grant than the round's call for the same
// tenant, and its batch is added first. Ordering by stamp would put the
// round's batch in front and name its (later) grant for tokens that
// include the refill's. Ordered by grant, a return of the front batches
// names the front one's grant, the oldest, and spends come out of the
// oldest grant first, which leaves the youngest tokens for returns, the
// ones Redis can credit most. (A grant whose ID is unknown, zero, is
// ordered by its stamp, and a return that includes its tokens names no
// grant: see oldestID. The lease client always gives IDs.)
//
// Expiry must still be FIFO: Expire and ExpiringBefore walk from the front
// and stop at the first batch not yet due. So stamps are kept
// non-decreasing along the list by lowering a batch's stamp to that of a
// later batch (one granted after it in Redis) when that is earlier: such a
// batch then expires early, never late, and its age is overstated, never
// understated, both the safe direction. It is lowered by at most the
// longest time between planning a call and Redis running it (about a
// round's duration): the later batch was planned at most that long before
// its grant, which came after this batch's grant, which came after this
// batch's stamp.
//
// A batch expires ttl after its stamp, with the ttl the caller passes
// at the time: when a tenant's lease TTL changes, the batches it holds take
// the new one.
//
// Total is what the syncer believes the counter holds. Requests only ever
// lower the counter, and the syncer is the only writer that raises it, so
// Total is always >= the counter and Sync can attribute the difference.
//
// The ledger is small on purpose (there is one per tenant): stamps are
// whole milliseconds after a base time, rounded down (so a batch looks
// older than it is, never younger), a batch is in use while it holds
// tokens, a grant is known by its 32-bit ID only (see grantDelta for how
// two are ordered), and the batches are allocated only while the ledger
// holds tokens: a tenant whose lease expired or went back keeps a nil
// pointer (8 bytes) instead of them (48). A ledger its spends or expiry
// drained keeps them, zeroed, until its owner trims it (trim): the
// syncer does so once a tenant's plan is carried out, so that a tenant
// that spent its whole lease and calls again gets its next batch in the
// same block, where one a round was made anew (BenchmarkRoundAcquire).
type Ledger struct {
	base int64 // unix nanoseconds; the batches' stamps are ms after it
	// b holds the batches, oldest grant first; nil when the ledger holds
	// no tokens (a batch in use holds at least one).
	b *batches
}

// batches are the batches of a Ledger that holds tokens.
type batches struct {
	left  [maxBatches]int64 // tokens of each batch; 0 ends the list
	stamp [maxBatches]stamp // local time of each batch (non-decreasing; see Ledger)
	// id is the GrantID of the oldest grant in each batch (zero when
	// unknown, or when the batch merged an unknown one), for the return of
	// its tokens to name (see lease.ReleaseRequest.Grant).
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
	if l.b == nil {
		return 0
	}
	i := 0
	for i < maxBatches && l.b.left[i] > 0 {
		i++
	}
	return i
}

// Total returns the tokens the ledger accounts for.
func (l *Ledger) Total() (total int64) {
	if l.b == nil {
		return 0
	}
	for _, x := range l.b.left {
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
	for rest > 0 && l.n() > 0 {
		if l.b.left[0] > rest {
			l.b.left[0] -= rest
			break
		}
		rest -= l.b.left[0]
		l.shift()
	}
	return spent
}

// expiresAt returns the unix nanoseconds at which batch i expires.
func (l *Ledger) expiresAt(i int, ttl time.Duration) int64 {
	return l.at(l.b.stamp[i]) + int64(ttl)
}

// Expire removes the batches whose time has come (stamped ttl or more
// before now) and returns their tokens, the earliest of their stamps (the
// zero time when none expired; no later than any of their grants, so a
// return's age measured from it is not understated) and the ID of their
// oldest grant (zero when unknown): the caller takes the tokens back from
// the counter.
func (l *Ledger) Expire(now time.Time, ttl time.Duration) (tokens int64, granted time.Time, id lease.GrantID) {
	ns := now.UnixNano()
	n := 0
	for n < l.n() && ns >= l.expiresAt(n, ttl) {
		tokens += l.b.left[n]
		n++
	}
	if n == 0 {
		return 0, time.Time{}, 0
	}
	granted, id = time.Unix(0, l.at(l.b.stamp[0])), l.oldestID(n)
	for range n {
		l.shift()
	}
	return tokens, granted, id
}

// Add records tokens granted by the grant with ID id (zero for unknown)
// at local time granted, no later than Redis ran the call (see Ledger).
// The batch goes after the batches of grants before it in Redis, whatever
// the order they are added in (see Ledger), and stamps are lowered to keep
// expiry FIFO.
func (l *Ledger) Add(granted time.Time, tokens int64, id lease.GrantID) {
	if tokens <= 0 {
		return
	}
	l.init(granted.UnixNano())
	if l.b == nil {
		l.b = new(batches)
	}
	b := l.b
	n := l.n()
	if n == maxBatches {
		// Merge the two oldest under the earlier stamp (the first's: stamps
		// do not decrease) and the older of their grants.
		b.id[1] = l.oldestID(2)
		b.left[1] += b.left[0]
		b.stamp[1] = b.stamp[0]
		l.shift()
		n--
	}
	s := l.stampOf(granted.UnixNano())
	i := n
	for i > 0 && grantedBefore(s, id, b.stamp[i-1], b.id[i-1]) {
		b.left[i], b.stamp[i], b.id[i] = b.left[i-1], b.stamp[i-1], b.id[i-1]
		i--
	}
	b.left[i], b.stamp[i], b.id[i] = tokens, s, id
	// A batch granted before a later-stamped one is stamped no later than
	// it, so that it expires no later.
	for j := n - 1; j >= 0; j-- {
		b.stamp[j] = min(b.stamp[j], b.stamp[j+1])
	}
}

// grantedBefore reports whether the grant with ID ia of a batch stamped sa
// was made before the grant ib of a batch stamped sb, in Redis time. When
// either ID is unknown it orders by stamp.
func grantedBefore(sa stamp, ia lease.GrantID, sb stamp, ib lease.GrantID) bool {
	if ia == 0 || ib == 0 {
		return sa < sb
	}
	return grantDelta(sa, ia, sb, ib) > 0
}

// grantDelta returns the Redis time of grant ib minus that of grant ia, in
// microseconds, for batches stamped sa and sb. An ID holds only the low 32
// bits of its grant's time, which wrap every 2^32 µs (about 71 minutes),
// and a lease may live longer than that. The stamps tell which wrap it is:
// both clocks move at the same pace, and a batch's stamp is before its
// grant by no more than the time from planning a call to Redis running it
// (lowered stamps included, see Ledger), so the difference of two grants
// is that of their stamps to within that time. Of the differences the IDs
// allow (one every 2^32 µs), it is the one nearest the stamps': exact
// while that time stays under 2^31 µs, about 35 minutes. (A stamp clamped
// at stampMin, 24 days in the past, breaks this; no lease lives that long.)
func grantDelta(sa stamp, ia lease.GrantID, sb stamp, ib lease.GrantID) int64 {
	local := (int64(sb) - int64(sa)) * int64(time.Millisecond/time.Microsecond)
	return local + int64(int32(uint32(ib-ia)-uint32(local)))
}

// oldestID returns the ID to name for a return of the first n batches
// (n >= 1): the oldest of their grants, or zero when one of them is
// unknown (a known ID might then be later than the unknown grant; with
// zero, Redis judges the return by its age). The batches are in order of
// grant, but an unknown grant, ordered by stamp, can come between two
// known ones out of their order, so it compares them all rather than take
// the first.
func (l *Ledger) oldestID(n int) lease.GrantID {
	b := l.b
	k := 0
	for i := range n {
		if b.id[i] == 0 {
			return 0
		}
		if grantedBefore(b.stamp[i], b.id[i], b.stamp[k], b.id[k]) {
			k = i
		}
	}
	return b.id[k]
}

// ExpiringBefore returns the tokens in batches that expire before t, given
// the lease TTL ttl.
func (l *Ledger) ExpiringBefore(t time.Time, ttl time.Duration) (tokens int64) {
	ns := t.UnixNano()
	for i := 0; i < l.n() && l.expiresAt(i, ttl) < ns; i++ {
		tokens += l.b.left[i]
	}
	return tokens
}

// trim drops the batches of a ledger that holds no tokens (shift keeps
// them): its owner calls it when no Add is coming soon, so that an idle
// tenant's ledger costs 8 bytes, not 56.
func (l *Ledger) trim() {
	if l.n() == 0 {
		l.b = nil
	}
}

// Clear forgets every batch (the counter was drained) and returns the
// tokens it accounted for, the earliest stamp (the zero time for none)
// and the ID of the oldest grant (zero when unknown), as Expire does.
func (l *Ledger) Clear() (tokens int64, oldest time.Time, id lease.GrantID) {
	tokens = l.Total()
	if tokens > 0 {
		oldest, id = time.Unix(0, l.at(l.b.stamp[0])), l.oldestID(l.n())
	}
	l.b = nil
	return tokens, oldest, id
}

// NextExpiry returns when the oldest batch expires, given the lease TTL
// ttl, and false when the ledger is empty.
func (l *Ledger) NextExpiry(ttl time.Duration) (time.Time, bool) {
	if l.n() == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, l.expiresAt(0, ttl)), true
}

// frontID returns the ID of the oldest batch's grant, zero when the
// ledger is empty or the ID unknown.
func (l *Ledger) frontID() lease.GrantID {
	if l.b == nil {
		return 0
	}
	return l.b.id[0]
}

// credit adds n > 0 tokens back to the oldest batch: the refund of tokens
// spent from it (see Syncer.Refund). The ledger must not be empty.
func (l *Ledger) credit(n int64) {
	if n > 0 && l.n() > 0 {
		l.b.left[0] += n
	}
}

// shift drops the oldest batch. The last one leaves the batches zeroed,
// for the next Add to reuse (see trim).
func (l *Ledger) shift() {
	b := l.b
	if b.left[1] == 0 {
		*b = batches{}
		return
	}
	copy(b.left[:], b.left[1:])
	copy(b.stamp[:], b.stamp[1:])
	copy(b.id[:], b.id[1:])
	b.left[maxBatches-1], b.stamp[maxBatches-1], b.id[maxBatches-1] = 0, 0, 0
}

// rebaseTo moves the base to ns, keeping every stamp's time (clamping
// those too far in the past). It returns the shift, in stamps, that the
// owner applies to stamps of its own.
func (l *Ledger) rebaseTo(ns int64) (shift int64) {
	shift = (ns - l.base) / int64(time.Millisecond)
	l.base += shift * int64(time.Millisecond)
	for i := range l.n() {
		l.b.stamp[i] = shiftStamp(l.b.stamp[i], shift)
	}
	return shift
}

// shiftStamp returns s moved back by shift, clamped at stampMin.
func shiftStamp(s stamp, shift int64) stamp {
	return stamp(max(int64(s)-shift, int64(stampMin)))
}
