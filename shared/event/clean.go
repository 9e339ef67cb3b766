package event

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What an event may hold is bounded by what PostgreSQL can store: text with no NUL and only
// valid UTF-8, and numbers within a double's range (jsonb refuses \u0000, lone surrogates and
// invalid bytes outright). An acknowledged event must be storable, so capture makes it so
// before acknowledging, as PostHog's ingestion does: such characters become U+FFFD.

// MaxIDRunes is the longest distinct id, event name, alias or group key or type kept, in
// characters; longer ones are cut at a character boundary (PostHog cuts distinct ids at 200).
const MaxIDRunes = 200

// replacement is U+FFFD, the Unicode replacement character, as a JSON escape.
const replacement = `\ufffd`

// CleanJSON returns body with what PostgreSQL's jsonb cannot hold made storable: invalid UTF-8
// bytes, NUL, \u0000 escapes and unpaired surrogate escapes become U+FFFD; other control
// characters are escaped; a backslash that starts no JSON escape (which lenient parsers keep
// as text) is escaped; and a number outside a double's range (1e999), or one that is not
// written as JSON writes numbers but that lenient parsers read (".5", "+1", "NaN"), becomes a
// string of its text, so the value is kept as sent. It
// returns body itself, without copying, when there is nothing to change — the common case.
// body need not be valid JSON: what is not JSON is left for the parser to refuse.
func CleanJSON(body []byte) []byte {
	var out []byte // nil until the first change
	keep := 0      // body[keep:i] is not yet copied to out
	change := func(i int, with string, skip int) {
		if out == nil {
			out = make([]byte, 0, len(body)+16)
		}
		out = append(out, body[keep:i]...)
		out = append(out, with...)
		keep = i + skip
	}
	inString := false
	for i := 0; i < len(body); {
		c := body[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				change(i, "\uFFFD", 1)
			}
			i += size
			continue
		}
		switch {
		case inString && c == '"':
			inString = false
		case inString && c < 0x20: // JSON wants control characters escaped; jsonb insists
			if c == 0 {
				change(i, replacement, 1)
			} else {
				change(i, `\u00`+string(hexDigits[c>>4])+string(hexDigits[c&0xf]), 1)
			}
		case inString && c == '\\':
			skip, kind := classifyEscape(body[i:])
			switch kind {
			case escapeRefused:
				change(i, replacement, skip)
			case escapeInvalid: // a lenient parser keeps it as text; so do we, escaped
				change(i, `\\`, 1)
			}
			i += skip
			continue
		case c == '"':
			inString = true
		case !inString && isNumberByte(c) && tokenStart(body, i): // not the e of true
			j := i + 1
			for j < len(body) && isNumberByte(body[j]) {
				j++
			}
			if j == i+1 && (c == '-' || c == '+') && isInfOrNaN(body[j:]) {
				j += 3
			}
			if tok := body[i:j]; !isJSONNumber(tok) || outOfRange(tok) {
				change(i, `"`+string(tok)+`"`, j-i)
			}
			i = j
			continue
		case !inString && (c == 'i' || c == 'I' || c == 'N' || c == 'n' && !bytes.HasPrefix(body[i:], []byte("null"))) && tokenStart(body, i):
			// Lenient parsers read inf and nan as numbers; keep them as text.
			if isInfOrNaN(body[i:]) {
				change(i, `"`+string(body[i:i+3])+`"`, 3)
				i += 3
				continue
			}
		}
		i++
	}
	if out == nil {
		return body
	}
	return append(out, body[keep:]...)
}

// The kinds of escape classifyEscape tells apart.
const (
	escapeValid   = iota
	escapeRefused // valid JSON that jsonb refuses: \u0000, an unpaired surrogate
	escapeInvalid // not a JSON escape: a backslash before another character, or \u without 4 hex digits
)

// classifyEscape looks at the escape that b starts with (b[0] is a backslash) and returns how
// many bytes to move past and its kind: an invalid escape moves past the backslash alone.
func classifyEscape(b []byte) (size, kind int) {
	if len(b) < 2 {
		return len(b), escapeValid // the string is cut: the parser refuses it
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, escapeValid
	case 'u':
	default:
		return 1, escapeInvalid
	}
	code, ok := hex4(b[2:])
	if !ok {
		return 1, escapeInvalid
	}
	switch {
	case code == 0:
		return 6, escapeRefused
	case code >= 0xD800 && code < 0xDC00:
		if len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if low, ok := hex4(b[8:]); ok && low >= 0xDC00 && low < 0xE000 {
				return 12, escapeValid
			}
		}
		return 6, escapeRefused
	case code >= 0xDC00 && code < 0xE000:
		return 6, escapeRefused
	}
	return 6, escapeValid
}

const hexDigits = "0123456789abcdef"

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// isJSONNumber reports whether tok is a number as JSON writes it:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. Lenient parsers take more (".5", "1.",
// "+1", "1-2"); PostgreSQL does not.
func isJSONNumber(tok []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(tok) && tok[i] == '-' {
		i++
	}
	switch {
	case i < len(tok) && tok[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(tok) && tok[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(tok)
}

// isInfOrNaN reports whether b starts with inf or nan, in any case.
func isInfOrNaN(b []byte) bool {
	return len(b) >= 3 && (bytes.EqualFold(b[:3], []byte("inf")) || bytes.EqualFold(b[:3], []byte("nan")))
}

// tokenStart reports whether a value token may start at body[i]: not inside a word (the e of
// true) nor right after a string.
func tokenStart(body []byte, i int) bool {
	if i == 0 {
		return true
	}
	p := body[i-1]
	return !(p|0x20 >= 'a' && p|0x20 <= 'z') && p != '"'
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// outOfRange reports whether a JSON number token is outside a double's range: it overflows,
// or it is a non-zero value too small to represent. Only tokens with an exponent or hundreds
// of digits can be; the rest are not parsed.
func outOfRange(tok []byte) bool {
	if len(tok) < 300 && !bytes.ContainsAny(tok, "eE") {
		return false
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if errors.Is(err, strconv.ErrRange) {
		return true
	}
	if f != 0 || err != nil {
		return false
	}
	mantissa := tok
	if e := bytes.IndexAny(tok, "eE"); e >= 0 {
		mantissa = tok[:e]
	}
	return bytes.ContainsAny(mantissa, "123456789") // underflowed to zero
}

// CleanString returns s fit to store: NUL and invalid UTF-8 become U+FFFD, and when maxRunes
// is positive it is cut to that many characters. It returns s itself when nothing changes.
func CleanString(s string, maxRunes int) string {
	if (maxRunes <= 0 || len(s) <= maxRunes) && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), 4*max(maxRunes, 1)))
	n := 0
	for _, r := range s { // ranging yields U+FFFD for each invalid byte
		if maxRunes > 0 && n == maxRunes {
			break
		}
		if r == 0 {
			r = utf8.RuneError
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
