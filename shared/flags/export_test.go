package flags

// UseSHABlocks turns the engine's use of the CPU's SHA extensions on or off (off: the
// crypto/sha1 path of CPUs without them), and returns the function that restores it.
func UseSHABlocks(on bool) (restore func()) {
	was := blocksAvailable
	blocksAvailable = on && was
	return func() { blocksAvailable = was }
}
