package flags

import (
	"crypto/sha1"
	"encoding"
	"encoding/binary"
	"hash"
	"reflect"
	"sync"

	"github.com/flagedge/flagedge/shared/flags/internal/sha1block"
)

// PostHog buckets a user by a hash in [0, 1]: the first 15 hex digits of a SHA-1 digest as
// a number (a hash value, 60 bits), over 0xFFFFFFFFFFFFFFF, in float64; a rollout or a
// variant is a range of that fraction. The engine compares hash values instead, against the
// bounds of the same ranges translated once at compilation (see lastWhere): the same answers
// without a conversion and a division per hash.

// maxHash is the largest hash value.
const maxHash = 1<<60 - 1

// longScale is 0xFFFFFFFFFFFFFFF as a float64, PostHog's hash denominator.
const longScale = float64(0xFFFFFFFFFFFFFFF)

// fraction is the hash PostHog compares for the hash value x.
func fraction(x uint64) float64 { return float64(x) / longScale }

// lastWhere returns the largest hash value x for which ok(fraction(x)) holds, or -1 when
// there is none. ok must hold for small fractions and fail from some point on, like
// "f <= 0.3": fraction never decreases as x grows, so those x are a prefix of [0, maxHash].
func lastWhere(ok func(f float64) bool) int64 {
	if !ok(fraction(0)) {
		return -1
	}
	lo, hi := uint64(0), uint64(maxHash) // ok holds at lo
	if ok(fraction(hi)) {
		return maxHash
	}
	for hi-lo > 1 { // ok fails at hi
		if mid := lo + (hi-lo)/2; ok(fraction(mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return int64(lo)
}

// lastAtMost is the largest hash value whose fraction is at most t (a rollout), -1 for none.
func lastAtMost(t float64) int64 { return lastWhere(func(f float64) bool { return f <= t }) }

// lastBelow is the largest hash value whose fraction is below t (a variant's bound), -1 for
// none.
func lastBelow(t float64) int64 { return lastWhere(func(f float64) bool { return f < t }) }

// hashString returns PostHog's hash value of prefix + sep + id + salt.
func hashString(prefix string, sep bool, id, salt string) uint64 {
	var buf [256]byte
	sum := sha1.Sum(appendHashInput(buf[:0], prefix, sep, id, salt))
	return binary.BigEndian.Uint64(sum[:8]) >> 4
}

func appendHashInput(b []byte, prefix string, sep bool, id, salt string) []byte {
	b = append(b, prefix...)
	if sep {
		b = append(b, '.')
	}
	b = append(b, id...)
	return append(b, salt...)
}

// block is an input of at most 55 bytes padded into one SHA-1 block, for sha1block: where
// the CPU has SHA extensions, an evaluation hashes through it (about 18 ns a hash, two at once
// about 29 ns, against about 40 for hasher and 85 for sha1.Sum), and through hasher otherwise.
type block [64]byte

// fill pads prefix + "." (with sep) + id + salt into b; false when it is longer than a block
// holds.
func (b *block) fill(prefix string, sep bool, id, salt string) bool {
	n := len(prefix) + len(id) + len(salt)
	if sep {
		n++
	}
	if n > 55 {
		return false
	}
	// Zeroing the whole block is four stores; clearing what follows the input would be a
	// call, and so would appending (about a tenth of an evaluation of many rollouts).
	*b = block{}
	k := copy(b[:], prefix)
	if sep {
		b[k] = '.'
		k++
	}
	k += copy(b[k:], id)
	copy(b[k:], salt)
	b[n] = 0x80
	binary.BigEndian.PutUint64(b[56:], uint64(n)*8)
	return true
}

// A flag's hash inputs are its key and "." (the same for every request), then the subject and
// a salt (the same for every flag of a request). An evaluation joins the two halves instead of
// copying both into a block for every hash: a flag's keyBlock holds its prefix at the start of
// a zeroed block, and a tail holds the subject, the salt and the 0x80 that ends the message
// from offset 64 of 128 zeroed bytes, so that the 64 bytes from 64-p are the rest of a block
// whose first p bytes are a prefix's. A join is eight ORs of words and the length: the
// copies it replaces were four variable-length moves, a tenth of an evaluation at 1,000 flags.

// tail is a hash subject and salt placed for join.
type tail struct {
	subj, salt string
	n          int // len(subj) + len(salt); above 55 none fits a block
	set        bool
	b          [128]byte
}

// place puts subj and salt into t.
func (t *tail) place(subj, salt string) {
	t.subj, t.salt, t.set, t.n = subj, salt, true, len(subj)+len(salt)
	t.b = [128]byte{}
	if t.n > 55 {
		return
	}
	k := 64 + copy(t.b[64:], subj)
	k += copy(t.b[k:], salt)
	t.b[k] = 0x80
}

// join pads key's prefix of p bytes (a keyBlock) followed by t into b, and reports whether the
// message fitted.
func (b *block) join(key *block, p int, t *tail) bool {
	n := p + t.n
	if n > 55 {
		return false
	}
	w := (*[64]byte)(t.b[64-p:])
	le := binary.LittleEndian
	le.PutUint64(b[0:], le.Uint64(key[0:])|le.Uint64(w[0:]))
	le.PutUint64(b[8:], le.Uint64(key[8:])|le.Uint64(w[8:]))
	le.PutUint64(b[16:], le.Uint64(key[16:])|le.Uint64(w[16:]))
	le.PutUint64(b[24:], le.Uint64(key[24:])|le.Uint64(w[24:]))
	le.PutUint64(b[32:], le.Uint64(key[32:])|le.Uint64(w[32:]))
	le.PutUint64(b[40:], le.Uint64(key[40:])|le.Uint64(w[40:]))
	le.PutUint64(b[48:], le.Uint64(key[48:])|le.Uint64(w[48:]))
	binary.BigEndian.PutUint64(b[56:], uint64(n)*8)
	return true
}

// newKeyBlock returns key + "." at the start of a zeroed block, or nil when no subject would
// fit after it.
func newKeyBlock(key string) *block {
	if len(key)+1 > 55 {
		return nil
	}
	b := new(block)
	b[copy(b[:], key)] = '.'
	return b
}

// blocksAvailable reports whether block's hashes can be used on this CPU.
var blocksAvailable = sha1block.Available

// value is the hash value of the input padded in b. Only when blocksAvailable.
func (b *block) value() uint64 { return sha1block.Top64((*[64]byte)(b)) >> 4 }

// values is value of a and b, computed together.
func values(a, b *block) (uint64, uint64) {
	x, y := sha1block.Top64x2((*[64]byte)(a), (*[64]byte)(b))
	return x >> 4, y >> 4
}

// hasher computes the same hashes as hashString at about half its cost, which matters
// because an evaluation hashes about once per flag: sha1.Sum spends as long copying the
// input and padding through its buffer as compressing the one block. The hasher pads the
// input itself, feeds the whole blocks to a reused SHA-1 state and reads the digest from the
// state (after the last padded block the state is the digest): its words in place when
// crypto/sha1's digest has the layout checked by stateWords, else its binary form.
type hasher struct {
	d     hash.Hash
	words *[5]uint32              // d's words h0…h4 in place; nil when not as checked
	state encoding.BinaryAppender // d's binary form; nil when neither works (then hashString is used)
	buf   [256]byte               // the padded input
	out   [128]byte               // d's binary form: "sha\x01", then h0…h4 big-endian
}

// hashers holds hashers between evaluations: the SHA-1 state is on the heap.
var hashers = sync.Pool{New: func() any { return newHasher() }}

func newHasher() *hasher {
	h := &hasher{d: sha1.New()}
	h.words = stateWords(h.d)
	h.state, _ = h.d.(encoding.BinaryAppender)
	// Check the ways of reading the state once rather than trust them, the fastest first.
	const in = "layout-check.user-1variant"
	want := hashString(in, false, "", "")
	if h.words != nil && h.hash(in, false, "", "") != want {
		h.words = nil
	}
	if h.words == nil && h.state != nil && h.hash(in, false, "", "") != want {
		h.state = nil
	}
	return h
}

// stateWords returns the words of a crypto/sha1 digest, when the digest is a struct whose
// first field is h [5]uint32 (as it has been since Go 1), else nil. Reading them in place
// saves a sixth of a hash: the binary form is 96 bytes written to be read 8.
func stateWords(d hash.Hash) *[5]uint32 {
	t := reflect.TypeOf(d)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || t.Elem().PkgPath() != "crypto/sha1" {
		return nil
	}
	if f := t.Elem().Field(0); f.Name != "h" || f.Offset != 0 || f.Type != reflect.TypeFor[[5]uint32]() {
		return nil
	}
	return (*[5]uint32)(reflect.ValueOf(d).UnsafePointer())
}

// hash is hashString through the reused state.
func (h *hasher) hash(prefix string, sep bool, id, salt string) uint64 {
	n := len(prefix) + len(id) + len(salt)
	if sep {
		n++
	}
	padded := ((n+8)/sha1.BlockSize + 1) * sha1.BlockSize // room for 0x80 and the 8-byte length
	if (h.words == nil && h.state == nil) || padded > len(h.buf) {
		return hashString(prefix, sep, id, salt)
	}
	b := appendHashInput(h.buf[:0], prefix, sep, id, salt)
	b = append(b, 0x80)
	clear(h.buf[len(b) : padded-8])
	binary.BigEndian.PutUint64(h.buf[padded-8:padded], uint64(n)*8)
	h.d.Reset()
	h.d.Write(h.buf[:padded])
	if h.words != nil {
		return (uint64(h.words[0])<<32 | uint64(h.words[1])) >> 4
	}
	st, err := h.state.AppendBinary(h.out[:0])
	if err != nil || len(st) < 12 {
		return hashString(prefix, sep, id, salt)
	}
	// h0 and h1 are read as the two words they were written as: one 8-byte load of two
	// 4-byte stores would wait for them to reach the cache.
	first := uint64(binary.BigEndian.Uint32(st[4:8]))<<32 | uint64(binary.BigEndian.Uint32(st[8:12]))
	return first >> 4
}
