package sfield

import "sync/atomic"

// Member caches a policy's RateLimit-Policy member for the last quota it
// was asked for: most policies see one quota, or a few. The middleware
// and grpcquota keep one per policy. Its zero value is empty and ready;
// it is safe for concurrent use.
type Member struct {
	last atomic.Pointer[member]
}

// member is the member for one quota, never written once stored.
type member struct {
	burst int64
	rate  float64
	field []string
}

// Field returns the member for the quota of burst and rate as a one-value
// slice, made by format when the last quota asked for was another. The
// slice is shared by every caller that gets it and must not be written.
func (m *Member) Field(burst int64, rate float64, format func() string) []string {
	if f := m.Cached(burst, rate); f != nil {
		return f
	}
	v := &member{burst: burst, rate: rate, field: []string{format()}}
	m.last.Store(v)
	return v.field
}

// Cached returns the member for the quota of burst and rate when it is
// the last one asked for, else nil: Field's common case, small enough to
// be inlined in the callers' request path, so that they make Field's
// closure only when the quota changed.
func (m *Member) Cached(burst int64, rate float64) []string {
	if v := m.last.Load(); v != nil && v.burst == burst && v.rate == rate {
		return v.field
	}
	return nil
}
