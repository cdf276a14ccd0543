package syncer

// LateGrace is lateGrace, for the tests of package syncer_test.
const LateGrace = lateGrace

// CallFloor is callFloor, for the tests of package syncer_test.
func (s *Syncer) CallFloor() int { return s.callFloor() }

// Nodes counts the Cluster masters the syncer keeps a redisNode for.
func (s *Syncer) Nodes() (n int) {
	s.nodes.Range(func(_, _ any) bool { n++; return true })
	return n
}
