package event

import "strconv"

// Limits bounds what one decoded request body may hold. Parsing JSON into a tree costs far
// more memory than the text (a 30-byte event becomes about 300 bytes of parsed values), so
// the counts are checked by Scan, in one pass that allocates nothing, before anything is
// parsed: a body over a limit costs its bytes and no more.
type Limits struct {
	// MaxEvents bounds the events of a batch: the elements of a top-level array, or of the
	// "batch" or "data" array of a top-level object.
	MaxEvents int
	// MaxValues bounds the JSON values (objects, arrays, strings, numbers, literals) of the
	// whole body.
	MaxValues int
	// MaxProperties bounds the keys of any one object.
	MaxProperties int
	// MaxDepth bounds the nesting of objects and arrays; at most MaxDepthLimit.
	MaxDepth int
	// MaxKeyBytes and MaxStringBytes bound an object key and a string value, as written
	// (escapes included).
	MaxKeyBytes, MaxStringBytes int
}

// MaxDepthLimit is the largest Limits.MaxDepth: Scan keeps one small frame per level on its
// stack.
const MaxDepthLimit = 128

// Stats is what Scan counted in a body, for estimating what parsing it will cost.
type Stats struct {
	Events, Values int
}

// LimitError reports a body over one of its Limits; Limit names it in words safe to show.
type LimitError struct {
	Limit string
	Max   int
}

func (e *LimitError) Error() string { return "more than " + strconv.Itoa(e.Max) + " " + e.Limit }

// frame is one open object or array.
type frame struct {
	object    bool
	expectKey bool // in an object, the next string is a key
	events    bool // the array holds the batch's events
	keys      int
}

// Scan counts the events and values of the JSON document body and checks them, the keys of
// each object, the nesting and the lengths of keys and strings against lim, stopping at the
// first limit passed. It does not validate the JSON (the parser that follows does), but
// whatever it is given it reads in one pass, without allocating.
func Scan(body []byte, lim Limits) (Stats, error) {
	sc := scanner{lim: lim}
	err := sc.scan(body)
	return sc.st, err
}

// scanner is Scan's state, kept on the caller's stack.
type scanner struct {
	lim      Limits
	st       Stats
	stack    [MaxDepthLimit]frame
	depth    int  // frames in use
	batchKey bool // the last key of the top-level object names the batch
}

// value counts a value in the innermost open object or array.
func (sc *scanner) value() error {
	sc.st.Values++
	if sc.st.Values > sc.lim.MaxValues {
		return &LimitError{"values in a request", sc.lim.MaxValues}
	}
	if sc.depth > 0 && sc.stack[sc.depth-1].events {
		sc.st.Events++
		if sc.st.Events > sc.lim.MaxEvents {
			return &LimitError{"events in a batch", sc.lim.MaxEvents}
		}
	}
	return nil
}

func (sc *scanner) scan(body []byte) error {
	maxDepth := min(sc.lim.MaxDepth, MaxDepthLimit)
	for i := 0; i < len(body); {
		switch c := body[i]; c {
		case ' ', '\t', '\r', '\n', ':':
			i++
		case ',':
			if sc.depth > 0 && sc.stack[sc.depth-1].object {
				sc.stack[sc.depth-1].expectKey = true
			}
			i++
		case '{', '[':
			if err := sc.value(); err != nil {
				return err
			}
			if sc.depth == maxDepth {
				return &LimitError{"levels of nesting", maxDepth}
			}
			sc.stack[sc.depth] = frame{object: c == '{', expectKey: c == '{',
				events: c == '[' && (sc.depth == 0 || sc.depth == 1 && sc.batchKey)}
			sc.depth++
			i++
		case '}', ']':
			if sc.depth == 0 {
				return invalid("unbalanced %q", c)
			}
			sc.depth--
			i++
		case '"':
			j := i + 1
			for j < len(body) && body[j] != '"' {
				if body[j] == '\\' {
					j++
				}
				j++
			}
			if err := sc.str(body[i+1 : min(j, len(body))]); err != nil {
				return err
			}
			i = j + 1
		default: // a number or a literal: up to the next delimiter
			if err := sc.value(); err != nil {
				return err
			}
			for i < len(body) && !isDelimiter(body[i]) {
				i++
			}
		}
	}
	return nil
}

// str counts the string s (its text as written), a key or a value.
func (sc *scanner) str(s []byte) error {
	if sc.depth == 0 || !sc.stack[sc.depth-1].object || !sc.stack[sc.depth-1].expectKey {
		if len(s) > sc.lim.MaxStringBytes {
			return &LimitError{"bytes in a string", sc.lim.MaxStringBytes}
		}
		return sc.value()
	}
	f := &sc.stack[sc.depth-1]
	f.expectKey = false
	f.keys++
	if f.keys > sc.lim.MaxProperties {
		return &LimitError{"properties in an object", sc.lim.MaxProperties}
	}
	if len(s) > sc.lim.MaxKeyBytes {
		return &LimitError{"bytes in a key", sc.lim.MaxKeyBytes}
	}
	if sc.depth == 1 {
		switch string(s) {
		case "batch", "data":
			sc.batchKey = true
		default:
			sc.batchKey = false
		}
	}
	return nil
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ':', '"', '{', '[', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}
