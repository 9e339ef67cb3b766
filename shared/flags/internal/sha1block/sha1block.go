// Package sha1block computes the leading 64 bits of the SHA-1 digests of messages that fit
// in one block (at most 55 bytes), one or two at a time, with the CPU's SHA extensions.
// PostHog's bucketing hashes a flag key and a distinct id once or twice per flag, about 45
// times a /decide: through crypto/sha1 each hash pays for the interface, the digest's
// bookkeeping and one block's compression on a dependency chain that leaves the CPU's SHA
// unit idle half the time; two independent blocks interleaved take little longer than one.
package sha1block

import "encoding/binary"

// Available reports whether Top64 and Top64x2 run on this CPU; callers use crypto/sha1
// otherwise.
var Available = available()

// Pad writes msg (at most 55 bytes) into b as SHA-1's single padded block and reports
// whether it fitted.
func Pad(b *[64]byte, msg []byte) bool {
	if len(msg) > 55 {
		return false
	}
	n := copy(b[:], msg)
	b[n] = 0x80
	clear(b[n+1 : 56])
	binary.BigEndian.PutUint64(b[56:], uint64(len(msg))*8)
	return true
}
