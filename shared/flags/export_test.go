package flags

import "math/bits"

// UseSHABlocks turns the engine's use of the CPU's SHA extensions on or off (off: the
// crypto/sha1 path of CPUs without them), and returns the function that restores it.
func UseSHABlocks(on bool) (restore func()) {
	was := blocksAvailable
	blocksAvailable = on && was
	return func() { blocksAvailable = was }
}

// HashedSlots reports how many flags s lists in its hashed flags, and how many of those are
// sure (needed in every evaluation).
func HashedSlots(s *Snapshot) (hashed, sure int) {
	return len(s.hashed), bits.OnesCount64(s.sure)
}
