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

// NodeNamed is node, for the tests of package syncer_test: the redisNode
// a call to the master named name would use, as an opaque identity.
func (s *Syncer) NodeNamed(name string) any { return s.node(name) }

// NodeKept reports whether the syncer keeps node (from NodeNamed) for
// name, the redisNode later calls to the master use.
func (s *Syncer) NodeKept(name string, node any) bool {
	v, ok := s.nodes.Load(name)
	return ok && v == node
}

// RefillsGathered is how many refills the open group of the syncer's one
// node holds (refillGroups): 0 when none is open.
func (s *Syncer) RefillsGathered() int {
	gs := &s.one.refills
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.open == nil {
		return 0
	}
	return len(gs.open.reqs)
}

// MaxInFlight is maxInFlight, for the tests of package syncer_test.
const MaxInFlight = maxInFlight
