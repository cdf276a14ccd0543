package rateshare

// LocalWindow maps a share granted by a call into the instance's own
// clock: the call was sent at sent and its reply arrived at arrived
// (instance clock, µs), and the store ran it at storeNow (store clock, the
// time the reply reports). The instance may accrue the share from arrived
// until sent + (sh.Until - storeNow), shortened by drift (the most the two
// clocks' rates may differ, as a fraction: 1e-4 for 100 ppm) over that
// span.
//
// Why it is safe whatever the clocks' offset: the store ran the call
// after it was sent and before the reply arrived, so arrived is no
// earlier than storeNow (>= sh.From) and sent + (sh.Until - storeNow) no
// later than sh.Until, in real time. A slow reply shortens the share by
// its round trip; it never lengthens it. A window that would end before
// it starts is empty (from == until).
func LocalWindow(sent, arrived, storeNow int64, sh Share, drift float64) (from, until int64) {
	span := sh.Until - storeNow
	if sh.Rate <= 0 || span <= 0 || arrived < sent {
		return arrived, arrived
	}
	span -= int64(float64(span)*max(drift, 0)) + 1 // +1: the float rounding of drift
	until = sent + span
	if until < arrived {
		return arrived, arrived
	}
	return arrived, until
}
