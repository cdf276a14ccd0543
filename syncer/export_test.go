package syncer

// LateGrace is lateGrace, for the tests of package syncer_test.
const LateGrace = lateGrace

// CallFloor is callFloor, for the tests of package syncer_test.
func (s *Syncer) CallFloor() int { return s.callFloor() }
