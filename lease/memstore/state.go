package memstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TenantState is a copy of what a Store keeps for one tenant, as a look at
// its Redis keys would show it: state that has expired is absent. It is
// for tests and tools (a simulation checking levels, say); a syncer never
// needs it.
type TenantState struct {
	// Bucket is nil when the bucket is missing: never used, or expired
	// once full. A missing bucket is a full one.
	Bucket *BucketState
	// Instances is the instance registry by id, nil when it is missing.
	// Entries older than the window are dropped only by the next acquire
	// that registers, as the script does.
	Instances       map[string]Registration
	InstancesExpire time.Time // when the registry goes (Redis's PEXPIRE)
	// Releases are the releases applied within the dedup window that
	// carried an id, oldest first; nil when none.
	Releases       []AppliedRelease
	ReleasesExpire time.Time
	Override       *lease.Override // nil when none
}

// BucketState is a tenant's bucket as stored: the hash fields tk, ts, h
// (the level history and its burst) and rg.
type BucketState struct {
	Tokens float64   // as of Time, not refilled since
	Time   time.Time // the bucket's time of its last write (its last call)
	// Burst is the burst History was recorded under.
	Burst int64
	// History is the level history, oldest first: each level bounds the
	// bucket's levels since the previous entry's time.
	History []Level
	// Expires is when the bucket goes (a full bucket by then); the zero
	// Time for never (the time to refill is beyond ~31,700 years). Redis
	// keeps a key until its clock in milliseconds is past the expiry.
	Expires time.Time
	// Summary is the instance registry's summary that acquires keep in
	// the bucket (field rg), nil when none.
	Summary *RegistrySummary
	// Shares are the rate shares in force as of Time (field sh): zero
	// when none is recorded (see SetShares).
	Shares lease.Shares
}

// RegistrySummary is what an acquire last computed from every entry of
// the instance registry; later acquires take the shares from it until it
// is an eighth of the registry window old.
type RegistrySummary struct {
	At        time.Time // the bucket's time of the acquire that computed it
	Instances int       // the active instances, the acquiring one included
	Demand    float64   // their total reported demand, tokens/s
	// Level is the water level of the max-min fair shares: each instance's
	// share is its demand, capped at Level; -1 when every demand is met.
	Level float64
}

// Level is one entry of a level history.
type Level struct {
	Time   time.Time
	Tokens float64
}

// AppliedRelease is a release id the store remembers, and the bucket's
// time of the release (its score in Redis's sorted set).
type AppliedRelease struct {
	ID string
	At time.Time
}

// Registration is one instance's entry in a tenant's instance registry.
type Registration struct {
	Seen   time.Time // the bucket's time of its last acquire
	Demand float64   // the demand it reported, tokens/s
	Credit float64   // its fair-share credit after that acquire, tokens
	// Share is the rate share it was granted last, as its entry records
	// it (in force only while the bucket's Shares hold it).
	Share lease.RateShare
}

// Tenant returns what s keeps for tenant as of its clock now. A clock out
// of range (ErrClock) reads as the zero TenantState.
func (s *Store) Tenant(tenant string) TenantState {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, nowMS, err := s.clock()
	if err != nil {
		return TenantState{}
	}
	t := s.lookup(tenant, nowMS)
	if t == nil {
		return TenantState{}
	}
	st := TenantState{Override: copyOverride(t.override)}
	if t.b.live {
		b := &BucketState{Tokens: t.b.tk, Time: time.UnixMicro(t.b.ts), Burst: t.b.hb, Expires: expiry(t.b.expire), Shares: t.b.sh}
		if rg := t.b.rg; rg != nil {
			b.Summary = &RegistrySummary{At: time.UnixMicro(rg.at), Instances: rg.n, Demand: rg.demand, Level: rg.level}
		}
		if t.b.hb != 0 {
			for _, e := range t.b.h.Entries() {
				b.History = append(b.History, Level{Time: time.UnixMicro(e.T), Tokens: e.L})
			}
		}
		st.Bucket = b
	}
	if len(t.reg.entries) > 0 {
		st.Instances = make(map[string]Registration, len(t.reg.entries))
		for id, e := range t.reg.entries {
			st.Instances[id] = Registration{Seen: time.UnixMicro(e.seen), Demand: e.demand, Credit: e.credit, Share: e.share}
		}
		st.InstancesExpire = expiry(t.reg.expire)
	}
	if len(t.rel.ids) > 0 {
		st.Releases = make([]AppliedRelease, len(t.rel.order))
		for i, e := range t.rel.order {
			st.Releases[i] = AppliedRelease{ID: e.id, At: time.UnixMicro(e.score)}
		}
		st.ReleasesExpire = expiry(t.rel.expire)
	}
	return st
}

// expiry is an expiry in milliseconds as a Time, zero for never.
func expiry(ms int64) time.Time {
	if ms == never {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ErrNoBucket is returned, wrapped, by SetShares for a tenant whose bucket
// is missing.
var ErrNoBucket = errors.New("memstore: no bucket")

// SetShares records sh as the rate shares in force in tenant's bucket, as
// an HSET of the bucket's field sh would in Redis (its time, tokens and
// expiry unchanged). This release's stores grant no share and honour
// what a later release records (lease.Shares): SetShares lets a test or a
// simulation put such a record in place. The zero Shares removes it. It
// returns an error wrapping lease.ErrBadShares for shares out of range,
// and one wrapping ErrNoBucket when the bucket is missing (a missing
// bucket is full, with no share in force).
func (s *Store) SetShares(tenant string, sh lease.Shares) error {
	if sh != (lease.Shares{}) {
		if err := sh.Validate(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, nowMS, err := s.clock()
	if err != nil {
		return err
	}
	t := s.lookup(tenant, nowMS)
	if t == nil || !t.b.live {
		return fmt.Errorf("%w: tenant %.64q", ErrNoBucket, tenant)
	}
	t.b.sh = sh
	return nil
}
