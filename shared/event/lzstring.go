package event

import (
	"errors"
	"unicode/utf16"
)

// ErrLZString reports an input that is not valid lz-string base64.
var ErrLZString = errors.New("invalid lz-string data")

// lzBase64 maps the characters of lz-string's base64 alphabet to their values; '=' is 64,
// as in the JavaScript library, and other bytes are 0.
var lzBase64 = func() (t [256]uint8) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = uint8(i)
	}
	return t
}()

// DecompressLZ64 is lz-string's decompressFromBase64 (the encoding posthog-js calls lz64):
// it returns the decompressed text as UTF-8. The output is bounded by maxOut bytes (UTF-16
// units times two); larger output is an error, so a small input cannot expand without limit.
func DecompressLZ64(input string, maxOut int) ([]byte, error) {
	return decompressLZ64(input, maxOut, nil)
}

// lzChunk is how many more output units lzDecompress reserves memory for at a time.
const lzChunk = 64 << 10

// lzUnitBytes is what one output unit costs until the UTF-8 text is returned: the unit (2
// bytes), its share of the dictionary (at most about one unit), the runes and the text.
const lzUnitBytes = 2 + 2 + 4 + 3

// decompressLZ64 is DecompressLZ64 asking reserve (when not nil) for memory as the output
// grows.
func decompressLZ64(input string, maxOut int, reserve func(int) error) ([]byte, error) {
	if input == "" {
		return nil, ErrLZString
	}
	r := lzReader{input: input, position: 32, val: uint32(lzBase64[input[0]]), index: 1}
	units, err := lzDecompress(&r, maxOut/2, reserve)
	if err != nil {
		return nil, err
	}
	return []byte(string(utf16.Decode(units))), nil
}

// lzReader reads bits, lowest first, from 6-bit characters as lz-string does.
type lzReader struct {
	input    string
	val      uint32
	position uint32
	index    int
}

func (r *lzReader) bits(n int) int {
	result, power := 0, 1
	for range n {
		bit := r.val & r.position
		r.position >>= 1
		if r.position == 0 {
			r.position = 32
			if r.index < len(r.input) {
				r.val = uint32(lzBase64[r.input[r.index]])
			} else {
				r.val = 0
			}
			r.index++
		}
		if bit > 0 {
			result |= power
		}
		power <<= 1
	}
	return result
}

func lzDecompress(r *lzReader, maxUnits int, reserve func(int) error) ([]uint16, error) {
	reserved := 0 // output units reserved so far
	dict := make([][]uint16, 3, 256)
	enlargeIn, numBits := 4, 3
	var c []uint16
	switch r.bits(2) {
	case 0:
		c = []uint16{uint16(r.bits(8))}
	case 1:
		c = []uint16{uint16(r.bits(16))}
	case 2:
		return []uint16{}, nil
	default:
		return nil, ErrLZString
	}
	dict = append(dict, c)
	w := c
	out := append([]uint16(nil), c...)
	for {
		if r.index > len(r.input) {
			return nil, ErrLZString // ran off the end without the end marker
		}
		code := r.bits(numBits)
		switch code {
		case 0, 1:
			width := 8
			if code == 1 {
				width = 16
			}
			dict = append(dict, []uint16{uint16(r.bits(width))})
			code = len(dict) - 1
			enlargeIn--
		case 2:
			return out, nil
		}
		if enlargeIn == 0 {
			enlargeIn = 1 << numBits
			numBits++
		}
		var entry []uint16
		switch {
		case code < len(dict) && code >= 3:
			entry = dict[code]
		case code == len(dict):
			entry = append(append(make([]uint16, 0, len(w)+1), w...), w[0])
		default:
			return nil, ErrLZString
		}
		out = append(out, entry...)
		if len(out) > maxUnits {
			return nil, ErrTooLarge
		}
		for reserve != nil && len(out) > reserved {
			if err := reserve(lzChunk * lzUnitBytes); err != nil {
				return nil, err
			}
			reserved += lzChunk
		}
		dict = append(dict, append(append(make([]uint16, 0, len(w)+1), w...), entry[0]))
		enlargeIn--
		w = entry
		if enlargeIn == 0 {
			enlargeIn = 1 << numBits
			numBits++
		}
	}
}
