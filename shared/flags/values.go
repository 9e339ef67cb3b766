package flags

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Properties are person or group properties: JSON-decoded values (string, float64 or
// json.Number, bool, nil, []any, map[string]any). Nil values count as absent.
type Properties map[string]any

// stringForm returns the string form of a scalar: strings as they are, numbers in their
// shortest form (integers without a fraction), booleans as true/false; ok is false for nil,
// lists and objects. A number's form is written into buf and the string shares buf's memory,
// so it is valid only while buf is unchanged: this keeps matching free of allocations.
func stringForm(v any, buf *[32]byte) (s string, ok bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	case float64:
		return bytesString(appendNumber(buf[:0], x)), true
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return bytesString(appendNumber(buf[:0], f)), true
		}
		return x.String(), true
	case int:
		return bytesString(strconv.AppendInt(buf[:0], int64(x), 10)), true
	case int64:
		return bytesString(strconv.AppendInt(buf[:0], x, 10)), true
	}
	return "", false
}

// bytesString views b as a string without copying; b must not change while it is used.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// scalarString is stringForm for values that must outlive the call: it allocates for
// numbers.
func scalarString(v any) (string, bool) {
	var buf [32]byte
	s, ok := stringForm(v, &buf)
	return strings.Clone(s), ok
}

func appendNumber(buf []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.AppendInt(buf, int64(f), 10)
	}
	return strconv.AppendFloat(buf, f, 'f', -1, 64)
}

// number reads v as a number: a JSON number or a string holding one.
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
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
	}
	return 0, false
}

// boolean reads v as a boolean: true/false or a string "true"/"false" in any case.
func boolean(v any) (b, ok bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		switch {
		case strings.EqualFold(x, "true"):
			return true, true
		case strings.EqualFold(x, "false"):
			return false, true
		}
	}
	return false, false
}

// hasPrefixFold reports whether s begins with prefix, ignoring case; prefix is lower case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// hasSuffixFold reports whether s ends with suffix, ignoring case; suffix is lower case.
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// containsFold reports whether lowerSub (already lower case) occurs in s ignoring case. ASCII
// strings are scanned in place; others are lowered first.
func containsFold(s, lowerSub string) bool {
	if lowerSub == "" {
		return true
	}
	if !isASCII(s) || !isASCII(lowerSub) {
		return strings.Contains(strings.ToLower(s), lowerSub)
	}
	first := lowerSub[0]
	for i := 0; i+len(lowerSub) <= len(s); i++ {
		if lowerASCII(s[i]) != first {
			continue
		}
		j := 1
		for ; j < len(lowerSub); j++ {
			if lowerASCII(s[i+j]) != lowerSub[j] {
				break
			}
		}
		if j == len(lowerSub) {
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
