package sha1block

// available checks CPUID for the SHA extensions (leaf 7, EBX bit 29) and SSSE3 (leaf 1, ECX
// bit 9, for PSHUFB): the only instructions Top64 uses beyond SSE2.
func available() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	_, ebx7, _, _ := cpuid(7, 0)
	return ecx1&(1<<9) != 0 && ebx7&(1<<29) != 0
}

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// Top64 returns the first 8 bytes of the SHA-1 digest of the message padded in b, as a
// big-endian number. Only when Available.
//
//go:noescape
func Top64(b *[64]byte) uint64

// Top64x2 is Top64 of two blocks, computed together. Only when Available.
//
//go:noescape
func Top64x2(a, b *[64]byte) (uint64, uint64)
