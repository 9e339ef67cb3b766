//go:build !amd64

package sha1block

func available() bool { return false }

// Top64 is not available on this architecture.
func Top64(b *[64]byte) uint64 { panic("sha1block: not available") }

// Top64x2 is not available on this architecture.
func Top64x2(a, b *[64]byte) (uint64, uint64) { panic("sha1block: not available") }
