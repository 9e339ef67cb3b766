package decide

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fastjson/fastfloat"
)

// scanner reads a JSON document in one pass, without building a tree of it: parse takes from
// a /decide body the fields it uses as it meets them and skips the rest. It accepts what
// fastjson's parser accepts and reads values as fastjson does (FuzzScanner compares them), so
// that bodies read the same as when they were parsed with it: strings unescaped on a
// best-effort basis (an invalid escape is kept as it is), numbers as fastjson's fastfloat reads
// them (NaN and Inf included), and nesting up to fastjson.MaxDepth.
//
// Strings it returns view buf, the document's copy, where they are unescaped in place: they
// are valid until the next reset.
type scanner struct {
	buf []byte
	i   int
	err error // the first syntax error; once set, every read fails
	at  int   // where err was met
}

// maxDepth is how deep values may nest, counting the document as 1 (fastjson.MaxDepth).
const maxDepth = 300

// Kinds of JSON values, told by their first byte (peek).
type kind uint8

const (
	kindNone kind = iota // the end of the document, or an error
	kindObject
	kindArray
	kindString
	kindNumber // including fastjson's nan and inf
	kindTrue
	kindFalse
	kindNull
)

var (
	errEmpty        = errors.New("cannot parse empty JSON")
	errUnexpected   = errors.New("unexpected character in JSON")
	errUnterminated = errors.New(`missing closing '"' in JSON string`)
	errDepth        = errors.New("JSON nested too deeply")
	errTail         = errors.New("unexpected data after the JSON value")
)

// reset makes the scanner read a copy of doc.
func (sc *scanner) reset(doc []byte) {
	sc.buf, sc.i, sc.err = append(sc.buf[:0], doc...), 0, nil
}

func (sc *scanner) fail(err error) {
	if sc.err == nil {
		sc.err, sc.at = err, sc.i
	}
	sc.i = len(sc.buf)
}

func (sc *scanner) skipWS() {
	for sc.i < len(sc.buf) {
		switch sc.buf[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// end checks that nothing but space follows the document.
func (sc *scanner) end() error {
	sc.skipWS()
	if sc.err == nil && sc.i < len(sc.buf) {
		sc.fail(errTail)
	}
	if sc.err == nil || sc.err == errEmpty {
		return sc.err
	}
	// Where, and the text there, so that a sender can find the mistake (a few bytes, quoted).
	near := sc.buf[min(sc.at, len(sc.buf)):min(sc.at+16, len(sc.buf))]
	return fmt.Errorf("%w at byte %d near %q", sc.err, sc.at, near)
}

// peek tells the kind of the value that starts at the next byte (after space) without
// reading it: a byte that starts no value is a number to fastjson, which then fails on it.
func (sc *scanner) peek() kind {
	sc.skipWS()
	if sc.i >= len(sc.buf) {
		return kindNone
	}
	switch c := sc.buf[sc.i]; c {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't':
		return kindTrue
	case 'f':
		return kindFalse
	case 'n':
		if strings.HasPrefix(sc.rest(), "null") {
			return kindNull
		}
	}
	return kindNumber
}

func (sc *scanner) rest() string { return bytesString(sc.buf[sc.i:]) }

// enter counts one more level of nesting for a value at depth.
func (sc *scanner) enter(depth int) bool {
	if depth > maxDepth {
		sc.fail(errDepth)
		return false
	}
	return true
}

// scalar reads a value that is not an object or an array and returns its kind and text: a
// string's unescaped, a number's as written.
func (sc *scanner) scalar(depth int) (kind, string) {
	k := sc.peek()
	if k == kindNone {
		sc.fail(errEmpty)
		return kindNone, ""
	}
	if !sc.enter(depth) {
		return kindNone, ""
	}
	rest := sc.rest()
	switch k {
	case kindString:
		sc.i++
		return kindString, sc.str()
	case kindTrue, kindFalse, kindNull:
		word := [...]string{kindTrue: "true", kindFalse: "false", kindNull: "null"}[k]
		if strings.HasPrefix(rest, word) {
			sc.i += len(word)
			return k, word
		}
		if k == kindFalse || k == kindTrue {
			sc.fail(errUnexpected)
			return kindNone, ""
		}
	case kindNumber:
		if rest[0] == 'n' { // not null: nan?
			if len(rest) >= 3 && strings.EqualFold(rest[:3], "nan") {
				sc.i += 3
				return kindNumber, rest[:3]
			}
			sc.fail(errUnexpected)
			return kindNone, ""
		}
		n := rawNumber(rest)
		if n == 0 {
			sc.fail(errUnexpected)
			return kindNone, ""
		}
		sc.i += n
		return kindNumber, rest[:n]
	}
	sc.fail(errUnexpected)
	return kindNone, ""
}

// rawNumber is the length of the number rest starts with, as fastjson reads one (any run of
// digits, signs, dots and exponents, or an optionally signed inf or nan), or 0.
func rawNumber(rest string) int {
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if (c >= '0' && c <= '9') || c == '.' || c == '-' || c == 'e' || c == 'E' || c == '+' {
			continue
		}
		if i == 0 || i == 1 && (rest[0] == '-' || rest[0] == '+') {
			if len(rest[i:]) >= 3 && (strings.EqualFold(rest[i:i+3], "inf") || strings.EqualFold(rest[i:i+3], "nan")) {
				return i + 3
			}
			return 0
		}
		return i
	}
	return len(rest)
}

// str reads a string whose opening quote has been read, and unescapes it in place. A quote
// after a backslash is part of the string, unless that backslash is escaped itself: a byte
// loop, as the strings of a body are short (strings.IndexByte costs more to start).
func (sc *scanner) str() string {
	b := sc.buf[sc.i:]
	escaped := false
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			sc.i += i + 1
			if escaped {
				return unescape(b[:i])
			}
			return bytesString(b[:i])
		case '\\':
			escaped = true
			i++
		}
	}
	sc.fail(errUnterminated)
	return ""
}

// unescape undoes a string's escapes in place, as fastjson does: an escape that is not valid
// JSON is kept as written.
func unescape(b []byte) string {
	n := strings.IndexByte(bytesString(b), '\\')
	if n < 0 {
		return bytesString(b)
	}
	out := b[:n]
	s := bytesString(b[n+1:])
	for len(s) > 0 {
		c := s[0]
		s = s[1:]
		switch c {
		case '"', '\\', '/':
			out = append(out, c)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if len(s) < 4 {
				out = append(out, `\u`...)
				break
			}
			xs := s[:4]
			x, err := strconv.ParseUint(xs, 16, 16)
			if err != nil {
				out = append(out, `\u`...)
				break
			}
			s = s[4:]
			if !utf16.IsSurrogate(rune(x)) {
				out = utf8.AppendRune(out, rune(x))
				break
			}
			if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
				out = append(out, `\u`...)
				out = append(out, xs...)
				break
			}
			x1, err := strconv.ParseUint(s[2:6], 16, 16)
			if err != nil {
				out = append(out, `\u`...)
				out = append(out, xs...)
				break
			}
			out = utf8.AppendRune(out, utf16.DecodeRune(rune(x), rune(x1)))
			s = s[6:]
		default:
			out = append(out, '\\', c)
		}
		n = strings.IndexByte(s, '\\')
		if n < 0 {
			out = append(out, s...)
			break
		}
		out = append(out, s[:n]...)
		s = s[n+1:]
	}
	return bytesString(out)
}

// object starts reading an object at depth: it reports whether a member follows, and then
// key reads it. The member's value is at depth+1; next moves past it.
func (sc *scanner) object(depth int) bool { return sc.open(kindObject, '}', depth) }

// array starts reading an array at depth, reporting whether an element follows (at
// depth+1); next moves past it.
func (sc *scanner) array(depth int) bool { return sc.open(kindArray, ']', depth) }

// open starts reading a container of kind k (ended by close) at depth, reporting whether
// something follows its opening.
func (sc *scanner) open(k kind, close byte, depth int) bool {
	if sc.peek() != k || !sc.enter(depth) {
		sc.fail(errUnexpected)
		return false
	}
	sc.i++
	sc.skipWS()
	if sc.i < len(sc.buf) && sc.buf[sc.i] == close {
		sc.i++
		return false
	}
	return sc.i < len(sc.buf) || sc.failed(errUnexpected)
}

// key reads a member's key and the colon after it.
func (sc *scanner) key() string {
	sc.skipWS()
	if sc.i >= len(sc.buf) || sc.buf[sc.i] != '"' {
		sc.fail(errUnexpected)
		return ""
	}
	sc.i++
	k := sc.str()
	sc.skipWS()
	if sc.i >= len(sc.buf) || sc.buf[sc.i] != ':' {
		sc.fail(errUnexpected)
		return ""
	}
	sc.i++
	return k
}

// next moves past a member's value (or an array's element) to the next one, reporting
// whether there is one before the container's end (close).
func (sc *scanner) next(close byte) bool {
	sc.skipWS()
	if sc.i < len(sc.buf) {
		switch sc.buf[sc.i] {
		case ',':
			sc.i++
			return true
		case close:
			sc.i++
			return false
		}
	}
	return sc.failed(errUnexpected)
}

func (sc *scanner) failed(err error) bool {
	sc.fail(err)
	return false
}

// skip reads a value at depth and drops it.
func (sc *scanner) skip(depth int) {
	switch sc.peek() {
	case kindObject:
		for more := sc.object(depth); more && sc.err == nil; more = sc.next('}') {
			sc.key()
			sc.skip(depth + 1)
		}
	case kindArray:
		for more := sc.array(depth); more && sc.err == nil; more = sc.next(']') {
			sc.skip(depth + 1)
		}
	default:
		sc.scalar(depth)
	}
}

// number is a number's value as fastjson reads it (0 when it is not one).
func number(text string) float64 {
	f, _ := fastfloat.Parse(text)
	return f
}
