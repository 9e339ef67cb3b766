package sha1block_test

import (
	"crypto/sha1"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/flagedge/flagedge/shared/flags/internal/sha1block"
)

// TestAgainstCryptoSHA1 compares both forms with crypto/sha1 for messages of every length
// that fits a block, random and structured like the engine's inputs.
func TestAgainstCryptoSHA1(t *testing.T) {
	if !sha1block.Available {
		t.Skip("no SHA extensions on this CPU")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b [64]byte
	for i := range 20000 {
		m1 := make([]byte, i%56)
		m2 := make([]byte, (i*7+3)%56)
		for j := range m1 {
			m1[j] = byte(rng.Uint32())
		}
		for j := range m2 {
			m2[j] = byte(rng.Uint32())
		}
		if i%3 == 0 {
			m1 = []byte("rollout-07.user-42-" + string(rune('0'+i%10)))
		}
		want1, want2 := top64(m1), top64(m2)
		if !sha1block.Pad(&a, m1) || !sha1block.Pad(&b, m2) {
			t.Fatalf("messages of %d and %d bytes do not fit", len(m1), len(m2))
		}
		if got := sha1block.Top64(&a); got != want1 {
			t.Fatalf("Top64(%q) = %x, want %x", m1, got, want1)
		}
		if g1, g2 := sha1block.Top64x2(&a, &b); g1 != want1 || g2 != want2 {
			t.Fatalf("Top64x2(%q, %q) = %x, %x, want %x, %x", m1, m2, g1, g2, want1, want2)
		}
	}
	if sha1block.Pad(&a, make([]byte, 56)) {
		t.Error("56 bytes fit one block")
	}
}

func top64(m []byte) uint64 {
	sum := sha1.Sum(m)
	return binary.BigEndian.Uint64(sum[:8])
}

func BenchmarkTop64(b *testing.B) {
	if !sha1block.Available {
		b.Skip("no SHA extensions on this CPU")
	}
	var blk [64]byte
	sha1block.Pad(&blk, []byte("experiment-03.user-42-1234567variant"))
	var x uint64
	for b.Loop() {
		x += sha1block.Top64(&blk)
	}
	_ = x
}

func BenchmarkTop64x2(b *testing.B) {
	if !sha1block.Available {
		b.Skip("no SHA extensions on this CPU")
	}
	var b1, b2 [64]byte
	sha1block.Pad(&b1, []byte("experiment-03.user-42-1234567variant"))
	sha1block.Pad(&b2, []byte("experiment-03.user-42-1234567"))
	var x uint64
	for b.Loop() {
		y, z := sha1block.Top64x2(&b1, &b2)
		x += y ^ z
	}
	_ = x
}

func BenchmarkCryptoSHA1(b *testing.B) {
	m := []byte("experiment-03.user-42-1234567variant")
	var x byte
	for b.Loop() {
		s := sha1.Sum(m)
		x += s[0]
	}
	_ = x
}
