package postgres

import (
	"crypto/rand"
	"crypto/sha256"
)

const tokenAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newToken returns prefix followed by 43 random base62 characters (about 256 bits).
func newToken(prefix string) string {
	const n = 43
	buf := make([]byte, n)
	out := make([]byte, 0, len(prefix)+n)
	out = append(out, prefix...)
	for filled := 0; filled < n; {
		if _, err := rand.Read(buf); err != nil {
			panic("crypto/rand failed: " + err.Error()) // the OS has no entropy: nothing sensible to do
		}
		for _, b := range buf {
			// Rejection sampling keeps the distribution uniform: 248 = 4 × 62.
			if b < 248 && filled < n {
				out = append(out, tokenAlphabet[b%62])
				filled++
			}
		}
	}
	return string(out)
}

// Prefixes of the credentials flagedge issues.
const (
	PersonalKeyPrefix  = "phx_"
	ProjectTokenPrefix = "phc_"
	SecretKeyPrefix    = "phs_"
)

// HashKey returns the SHA-256 of a key, the only form in which personal keys are stored.
func HashKey(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}
