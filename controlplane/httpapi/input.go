package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/event"
)

// The checks in this file run at the API's boundary, before any handler: every query
// parameter and path value (in ServeHTTP) and every JSON body (in decodeObject) is refused
// with a 400 naming the offending field when PostgreSQL could not store or compare it. Text
// in PostgreSQL cannot hold NUL and must be valid UTF-8; jsonb also refuses lone UTF-16
// surrogates in escapes and numbers beyond its numeric range. Catching these here, in one
// place, keeps every handler and store free of the check and turns what used to be a 500
// into a field error.

// maxNumberLen bounds a JSON number literal. Numbers that long are never meaningful to this
// API, and PostgreSQL's numeric type refuses some of them (too many digits after the point).
const maxNumberLen = 100

// maxExponent bounds a JSON number's decimal exponent: beyond ±308 a number is not a float64
// (what the API computes with), and PostgreSQL's numeric refuses exponents far beyond that.
const maxExponent = 308

// textProblem describes why s cannot be stored as PostgreSQL text, or is "" when it can.
func textProblem(s string) string { return controlplane.TextProblem(s) }

// checkQuery refuses a query parameter (name or value) that is not storable text.
func checkQuery(q url.Values) error {
	for name, values := range q {
		if p := textProblem(name); p != "" {
			return controlplane.FieldError(event.CleanString(name, event.MaxIDRunes), "invalid_input", "Query parameter name: "+p)
		}
		for _, v := range values {
			if p := textProblem(v); p != "" {
				return controlplane.FieldError(event.CleanString(name, event.MaxIDRunes), "invalid_input", p)
			}
		}
	}
	return nil
}

// checkPath refuses a path whose segments are not storable text. pattern is the route the
// path matched ("GET /api/projects/{project_id}/events/{id}"); the error's attr is the name
// of the path value at the offending segment.
func checkPath(pattern, escapedPath string) error {
	_, patternPath, _ := strings.Cut(pattern, " ")
	if patternPath == "" {
		patternPath = pattern
	}
	names := strings.Split(strings.Trim(patternPath, "/"), "/")
	segments := strings.Split(strings.Trim(escapedPath, "/"), "/")
	for i, seg := range segments {
		value, err := url.PathUnescape(seg)
		if err != nil {
			value = seg
		}
		p := textProblem(value)
		if p == "" {
			continue
		}
		attr := "path"
		if i < len(names) && strings.HasPrefix(names[i], "{") {
			attr = strings.TrimSuffix(strings.Trim(names[i], "{}"), "...")
		}
		return controlplane.FieldError(attr, "invalid_input", p)
	}
	return nil
}

// jsonTextProblem scans a syntactically valid JSON document for what PostgreSQL cannot
// store: a string (object key or value, at any depth) holding NUL (raw or \u0000), invalid
// UTF-8 or a lone surrogate escape, and numbers out of range. It returns the top-level
// object key under which the problem lies (the key itself when the key is the problem; ""
// when the document is not an object) and a message, or ok.
func jsonTextProblem(data []byte) (attr, problem string, ok bool) {
	type frame struct {
		object    bool
		expectKey bool
	}
	var stack []frame
	top := ""
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '{' || c == '[':
			stack = append(stack, frame{object: c == '{', expectKey: c == '{'})
			i++
		case c == '}' || c == ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			i++
		case c == ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
			i++
		case c == ':':
			if n := len(stack); n > 0 {
				stack[n-1].expectKey = false
			}
			i++
		case c == '"':
			end, s, p := scanString(data, i)
			isTopKey := len(stack) == 1 && stack[0].object && stack[0].expectKey
			if isTopKey {
				top = s
			}
			if p != "" {
				return event.CleanString(top, event.MaxIDRunes), p, false
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(data) && strings.IndexByte("+-.eE0123456789", data[j]) >= 0 {
				j++
			}
			if p := numberProblem(data[i:j]); p != "" {
				return event.CleanString(top, event.MaxIDRunes), p, false
			}
			i = j
		default: // whitespace, true, false, null
			i++
		}
	}
	return "", "", true
}

// scanString reads the JSON string literal starting at data[start] (a quote) and returns
// the index after it, its value (decoded well enough to name a field) and what makes it
// unstorable, if anything.
func scanString(data []byte, start int) (end int, value, problem string) {
	var b strings.Builder
	i := start + 1
	for i < len(data) {
		c := data[i]
		switch {
		case c == '"':
			s := b.String()
			if problem == "" {
				problem = textProblem(s)
			}
			return i + 1, s, problem
		case c == '\\' && i+1 < len(data):
			if data[i+1] != 'u' || i+6 > len(data) {
				b.WriteByte(unescape(data[i+1]))
				i += 2
				continue
			}
			r, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 32)
			if err != nil {
				i += 2
				continue
			}
			i += 6
			switch {
			case r >= 0xD800 && r <= 0xDBFF: // a high surrogate needs a low one next
				if i+6 <= len(data) && data[i] == '\\' && data[i+1] == 'u' {
					if lo, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 32); err == nil && lo >= 0xDC00 && lo <= 0xDFFF {
						b.WriteRune(rune(0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)))
						i += 6
						continue
					}
				}
				b.WriteRune(utf8.RuneError)
				if problem == "" {
					problem = "Lone UTF-16 surrogates are not allowed."
				}
			case r >= 0xDC00 && r <= 0xDFFF:
				b.WriteRune(utf8.RuneError)
				if problem == "" {
					problem = "Lone UTF-16 surrogates are not allowed."
				}
			default:
				b.WriteRune(rune(r))
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	return len(data), b.String(), "Unterminated string."
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	case 'r':
		return '\r'
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	}
	return c // " \ /
}

// numberProblem describes why a JSON number literal is out of the API's range, or is "".
func numberProblem(lit []byte) string {
	if len(lit) > maxNumberLen {
		return "Number has too many digits."
	}
	s := string(lit)
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(s[k+1:], "+"))
		if err != nil || exp > maxExponent || exp < -maxExponent {
			return "Number out of range."
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err != nil || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
		return "Number out of range."
	}
	return ""
}

// checkRequest refuses a request whose query or path values are not storable text; it runs
// once for every routed request, before authentication and the handler.
func checkRequest(r *http.Request, pattern string) error {
	if err := checkQuery(r.URL.Query()); err != nil {
		return err
	}
	return checkPath(pattern, r.URL.EscapedPath())
}
