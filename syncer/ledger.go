package syncer

import "time"

// maxBatches bounds the ledger's memory per tenant. When more batches are
// held, the two oldest merge under the earlier expiry: a merged batch
// expires early, never late, so the lease lifetime bound still holds. A
// busy tenant holds about two (the expiring lease and its replacement).
const maxBatches = 4

// batch is tokens granted together and the time they must be spent by.
type batch struct {
	expires int64 // unix nanoseconds
	left    int64
}

// Ledger tracks which of a tenant's leased tokens were granted when, so
// that tokens older than the lease TTL can be taken back. Tokens are
// fungible, so spends are attributed to the oldest batch first (FIFO):
// this is the order that keeps every spent token within its lifetime.
//
// Total is what the syncer believes the counter holds. Requests only ever
// lower the counter, and the syncer is the only writer that raises it, so
// Total is always >= the counter and Sync can attribute the difference.
type Ledger struct {
	batches [maxBatches]batch // oldest first, n in use
	total   int64
	n       int8
}

// Total returns the tokens the ledger accounts for.
func (l *Ledger) Total() int64 { return l.total }

// Sync brings the ledger down to level, the counter's current value, and
// returns the tokens spent since the last call (attributed oldest first).
func (l *Ledger) Sync(level int64) (spent int64) {
	if level >= l.total {
		return 0
	}
	spent = l.total - level
	rest := spent
	for l.n > 0 && rest > 0 {
		b := &l.batches[0]
		if b.left > rest {
			b.left -= rest
			rest = 0
			break
		}
		rest -= b.left
		l.shift()
	}
	l.total = level
	return spent
}

// Expire removes the batches whose time has come and returns their tokens:
// the caller takes those back from the counter.
func (l *Ledger) Expire(now time.Time) (tokens int64) {
	ns := now.UnixNano()
	for l.n > 0 && ns >= l.batches[0].expires {
		tokens += l.batches[0].left
		l.shift()
	}
	l.total -= tokens
	return tokens
}

// Add records tokens granted that expire at expires. Batches are kept in
// order of expiry, whatever the order they are added in (a round that read
// the clock before an urgent refill may apply its grant after it).
func (l *Ledger) Add(expires time.Time, tokens int64) {
	if tokens <= 0 {
		return
	}
	if l.n == maxBatches {
		// Merge the two oldest under the earlier expiry (the first's).
		l.batches[1].left += l.batches[0].left
		l.batches[1].expires = l.batches[0].expires
		l.shift()
	}
	b := batch{expires: expires.UnixNano(), left: tokens}
	i := l.n
	for i > 0 && l.batches[i-1].expires > b.expires {
		l.batches[i] = l.batches[i-1]
		i--
	}
	l.batches[i] = b
	l.n++
	l.total += tokens
}

// ExpiringBefore returns the tokens in batches that expire before t.
func (l *Ledger) ExpiringBefore(t time.Time) (tokens int64) {
	ns := t.UnixNano()
	for i := int8(0); i < l.n && l.batches[i].expires < ns; i++ {
		tokens += l.batches[i].left
	}
	return tokens
}

// Clear forgets every batch (the counter was drained) and returns the
// tokens it accounted for.
func (l *Ledger) Clear() int64 {
	t := l.total
	*l = Ledger{}
	return t
}

// NextExpiry returns when the oldest batch expires, and false when the
// ledger is empty.
func (l *Ledger) NextExpiry() (time.Time, bool) {
	if l.n == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, l.batches[0].expires), true
}

func (l *Ledger) shift() {
	copy(l.batches[:], l.batches[1:l.n])
	l.n--
	l.batches[l.n] = batch{}
}
