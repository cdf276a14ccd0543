package syncer

// LateGrace is lateGrace, for the tests of package syncer_test.
const LateGrace = lateGrace
