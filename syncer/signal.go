package syncer

import "sync"

// signal wakes every goroutine waiting for an event, each time it
// happens: waiters take the channel C returns and select on it; Broadcast
// closes it and starts a new one. A waiter that takes the channel after a
// Broadcast waits for the next, so check the condition after taking it.
// The zero value is ready to use.
//
// Waiting on a channel rather than on a lock or a condition variable lets
// a waiter also select on its context, and lets testing/synctest see it
// as durably blocked, so a simulation's fake clock moves on.
type signal struct {
	mu sync.Mutex    // guards ch
	ch chan struct{} // nil until the first C
}

// C returns the channel closed by the next Broadcast.
func (s *signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Broadcast wakes every waiter on the channel C returned so far.
func (s *signal) Broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
