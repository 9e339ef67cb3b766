package flags

// UseSHABlocks turns the engine's use of the CPU's SHA extensions on or off (off: the
// crypto/sha1 path of CPUs without them), and returns the function that restores it.
func UseSHABlocks(on bool) (restore func()) {
	was := blocksAvailable
	blocksAvailable = on && was
	return func() { blocksAvailable = was }
}

// HashedFlags reports how many flags of s are hashed with a partner (markHashed), and how
// many have one.
func HashedFlags(s *Snapshot) (hashed, partnered int) {
	for i := range s.flags {
		if s.flags[i].hashed {
			hashed++
			if s.flags[i].hashPartner >= 0 {
				partnered++
			}
		}
	}
	return hashed, partnered
}
