package rateshare

// LocalWindow maps a share granted by a call into the instance's own
// clock: the call was sent at sent and its reply arrived at arrived
// (instance clock, µs), and the store ran it at storeNow (store clock: the
// store's TIME, which a reply reports as its time less its wait on a
// frozen bucket, lease.Grant.Wait). The instance may accrue the share
// from arrived, or when the share's From is after storeNow (granted on a
// bucket frozen ahead of the clock by reservations) from arrived plus
// that lead, lengthened by drift (the most the two clocks' rates may
// differ, as a fraction: 1e-4 for 100 ppm), until sent + (sh.Until -
// storeNow), shortened by drift over that span.
//
// Why it is safe whatever the clocks' offset: the store ran the call
// after it was sent and before the reply arrived, so arrived plus the
// lead is no earlier than sh.From and sent + (sh.Until - storeNow) no
// later than sh.Until, in real time. A slow reply shortens the share by
// its round trip; it never lengthens it. A window that would end before
// it starts is empty (from == until). (Taking storeNow for From when the
// share started later accrued the lead's tokens before the store made
// them: 48 of a share of 50 a second granted 980 ms ahead of the clock.)
func LocalWindow(sent, arrived, storeNow int64, sh Share, drift float64) (from, until int64) {
	span := sh.Until - storeNow
	if sh.Rate <= 0 || span <= 0 || arrived < sent {
		return arrived, arrived
	}
	from = arrived
	if lead := sh.From - storeNow; lead > 0 {
		from += lead + int64(float64(lead)*max(drift, 0)) + 1
	}
	span -= int64(float64(span)*max(drift, 0)) + 1 // +1: the float rounding of drift
	until = sent + span
	if until < from {
		return from, from
	}
	return from, until
}
