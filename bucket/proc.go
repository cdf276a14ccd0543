package bucket

import (
	_ "unsafe" // for go:linkname
)

// procPin and procUnpin are the runtime's, as sync.Pool uses them: the
// only way to learn which P a goroutine runs on. The runtime keeps them
// for the packages that link to them (go.dev/issue/67401).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// procIndex returns the index of the P the calling goroutine runs on now.
// The goroutine may move right after: a split Counter's slots are a
// preference, not an ownership, so a spend from another P's slot is
// correct, only slower.
func procIndex() int {
	p := procPin()
	procUnpin()
	return p
}
