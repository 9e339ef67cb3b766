package flags

import (
	"crypto/sha1"
	"encoding/binary"
)

// longScale is 0xFFFFFFFFFFFFFFF (15 hex digits) as a float64, PostHog's hash denominator.
const longScale = float64(0xFFFFFFFFFFFFFFF)

// hashString returns PostHog's bucketing hash of prefix + sep + id + salt in [0, 1]: the
// first 15 hex digits of the SHA-1 digest as a number, over 0xFFFFFFFFFFFFFFF.
func hashString(prefix string, sep bool, id, salt string) float64 {
	var buf [256]byte
	n := len(prefix) + len(id) + len(salt) + 1
	in := buf[:0]
	if n > len(buf) {
		in = make([]byte, 0, n)
	}
	in = append(in, prefix...)
	if sep {
		in = append(in, '.')
	}
	in = append(in, id...)
	in = append(in, salt...)
	sum := sha1.Sum(in)
	return float64(binary.BigEndian.Uint64(sum[:8])>>4) / longScale
}

// hash is the flag hash: sha1(key + "." + id + salt).
func hash(key, id, salt string) float64 { return hashString(key, true, id, salt) }

// holdoutHash is the holdout hash: sha1("holdout-" + id), independent of the flag.
func holdoutHash(id string) float64 { return hashString("holdout-", false, id, "") }
