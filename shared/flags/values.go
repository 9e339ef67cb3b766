package flags

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// Properties are person or group properties: JSON-decoded values (string, float64 or
// json.Number, bool, nil, []any, map[string]any). A key present with a nil value is a
// property set to null, which is not the same as a missing one (docs/flags.md).
type Properties map[string]any

// The operators compare values by their string form as PostHog's server writes a JSON value:
// strings as they are, numbers as serde_json prints them, true/false, null, and lists and
// objects as compact JSON.

// stringForm returns the string form of v. A number's or a boolean's form is written into
// buf and the string shares buf's memory, so it is valid only while buf is unchanged: this
// keeps matching scalars free of allocations. Lists and objects are encoded (rare: those
// allocate).
func stringForm(v any, buf *[32]byte) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "null"
	case bool:
		if x {
			return "true"
		}
		return "false"
	case float64:
		return bytesString(appendNumber(buf[:0], x))
	case json.Number:
		return bytesString(appendJSONNumber(buf[:0], x))
	case int:
		return bytesString(strconv.AppendInt(buf[:0], int64(x), 10))
	case int64:
		return bytesString(strconv.AppendInt(buf[:0], x, 10))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// bytesString views b as a string without copying; b must not change while it is used.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// text is v's string form in memory of its own: a string as it is, another value formatted
// (rare, so the allocation is acceptable), for callers that may keep it (the regexp
// packages, the version cache).
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var buf [32]byte
	return strings.Clone(stringForm(v, &buf))
}

// appendNumber writes a decoded number: integral values without a fraction (a request's
// numbers arrive as float64, so 5 and 5.0 cannot be told apart), others in their shortest
// form.
func appendNumber(buf []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.AppendInt(buf, int64(f), 10)
	}
	return appendFloat(buf, f)
}

// appendJSONNumber writes a JSON number literal as serde_json prints it: an integer literal as
// an integer, any other as a float, which always shows a fraction or an exponent (5.0, 1e21).
func appendJSONNumber(buf []byte, n json.Number) []byte {
	s := n.String()
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.AppendInt(buf, i, 10)
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return strconv.AppendUint(buf, u, 10)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return append(buf, s...)
	}
	return appendFloat(buf, f)
}

// appendFloat writes a float as Rust's shortest round-trip form does: plain decimals with at
// least one fractional digit between 1e-5 and 1e16, else an exponent without a plus sign.
func appendFloat(buf []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(buf, "null"...)
	}
	if a := math.Abs(f); a == 0 || (a >= 1e-5 && a < 1e16) {
		start := len(buf)
		buf = strconv.AppendFloat(buf, f, 'f', -1, 64)
		if bytes.IndexByte(buf[start:], '.') < 0 {
			buf = append(buf, ".0"...)
		}
		return buf
	}
	start := len(buf)
	buf = strconv.AppendFloat(buf, f, 'e', -1, 64)
	// Go writes 1e+21 and 1e-07; Rust writes 1e21 and 1e-7.
	if i := bytes.IndexByte(buf[start:], 'e'); i >= 0 {
		exp := buf[start+i+1:]
		neg := len(exp) > 0 && exp[0] == '-'
		digits := strings.TrimLeft(strings.TrimLeft(string(exp), "+-"), "0")
		if digits == "" {
			digits = "0"
		}
		buf = buf[:start+i+1]
		if neg {
			buf = append(buf, '-')
		}
		buf = append(buf, digits...)
	}
	return buf
}

// number reads v as a number as the server's gt/gte/lt/lte and date operators do: a JSON
// number, or a string that is all of a Rust float literal (no surrounding space; inf and NaN
// spelled out are numbers). Booleans, null, lists and objects are not numbers.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case string:
		return parseRustFloat(x)
	}
	return 0, false
}

// parseRustFloat parses s as Rust's f64::from_str does: an optional sign, then digits with an
// optional fraction and exponent, or inf, infinity or nan in any case.
func parseRustFloat(s string) (float64, bool) {
	body := s
	if body != "" && (body[0] == '+' || body[0] == '-') {
		body = body[1:]
	}
	if body == "" {
		return 0, false
	}
	if !strings.EqualFold(body, "inf") && !strings.EqualFold(body, "infinity") && !strings.EqualFold(body, "nan") {
		digits := false
		for i := 0; i < len(body); i++ {
			c := body[i]
			switch {
			case c >= '0' && c <= '9':
				digits = true
			case c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-':
			default:
				return 0, false
			}
		}
		if !digits {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true // Rust saturates to ±inf or 0 instead of failing
		}
		return 0, false
	}
	return f, true
}

// truthy is the server's truth of a value for exact and is_not with boolean operands: true,
// a string that lower-cases to "true", or a list whose elements are all truthy.
func truthy(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return strings.EqualFold(x, "true") && isASCII(x)
	case []any:
		for _, e := range x {
			if !truthy(e) {
				return false
			}
		}
		return true
	}
	return false
}

// booleanLike reports whether the server compares v as a boolean: a boolean, "true" or
// "false" in any case, or a list of only those (an empty list included).
func booleanLike(v any) bool {
	switch x := v.(type) {
	case bool:
		return true
	case string:
		return isASCII(x) && (strings.EqualFold(x, "true") || strings.EqualFold(x, "false"))
	case []any:
		for _, e := range x {
			if !booleanLike(e) {
				return false
			}
		}
		return true
	}
	return false
}

// lowerASCIIString lower-cases the ASCII letters of s and nothing else, as the server's
// icontains, starts_with and ends_with do.
func lowerASCIIString(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// hasPrefixFold reports whether s begins with prefix, ASCII letters compared without case;
// prefix is lower case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && equalASCIIFold(s[:len(prefix)], prefix)
}

// hasSuffixFold reports whether s ends with suffix, ASCII letters compared without case;
// suffix is lower case.
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && equalASCIIFold(s[len(s)-len(suffix):], suffix)
}

func equalASCIIFold(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		if lowerASCII(s[i]) != lower[i] {
			return false
		}
	}
	return true
}

// containsFold reports whether lowerSub occurs in s, ASCII letters compared without case (the
// server lower-cases ASCII only: É and é differ); lowerSub is lower case.
func containsFold(s, lowerSub string) bool {
	if lowerSub == "" {
		return true
	}
	first := lowerSub[0]
	for i := 0; i+len(lowerSub) <= len(s); i++ {
		if lowerASCII(s[i]) == first && equalASCIIFold(s[i+1:i+len(lowerSub)], lowerSub[1:]) {
			return true
		}
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// The server's exact and is_not compare Rust's str::to_lowercase of both sides: the full
// Unicode lower-case mapping, which differs from Go's per-rune unicode.ToLower for İ (which
// becomes i and a combining dot) and for Σ at the end of a word (ς); it is not case folding
// (ſ and s, or ß and ss, stay different).

// lowerUnicode is Rust's to_lowercase of s.
func lowerUnicode(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == 'İ':
			b.WriteString("i\u0307")
		case r == 'Σ':
			b.WriteRune(sigma(s, i))
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// equalLower reports whether lowerUnicode(s) == lower, without allocating.
func equalLower(s, lower string) bool {
	if isASCII(s) {
		return len(s) == len(lower) && equalASCIIFold(s, lower)
	}
	j := 0
	next := func(want rune) bool {
		if j >= len(lower) {
			return false
		}
		r, n := utf8.DecodeRuneInString(lower[j:])
		j += n
		return r == want
	}
	for i, r := range s {
		switch {
		case r == 'İ':
			if !next('i') || !next('\u0307') {
				return false
			}
		case r == 'Σ':
			if !next(sigma(s, i)) {
				return false
			}
		default:
			if !next(unicode.ToLower(r)) {
				return false
			}
		}
	}
	return j == len(lower)
}

// sigma is the lower case of the Σ at byte i of s: final ς when a cased letter precedes it
// and none follows (case-ignorable characters skipped), else σ.
func sigma(s string, i int) rune {
	before := false
	for k := i; k > 0; {
		r, n := utf8.DecodeLastRuneInString(s[:k])
		k -= n
		if caseIgnorable(r) {
			continue
		}
		before = cased(r)
		break
	}
	if !before {
		return 'σ'
	}
	for k := i + len("Σ"); k < len(s); {
		r, n := utf8.DecodeRuneInString(s[k:])
		k += n
		if caseIgnorable(r) {
			continue
		}
		if cased(r) {
			return 'σ'
		}
		break
	}
	return 'ς'
}

func cased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '^', '`', '\u00B7', '\u2019':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}
