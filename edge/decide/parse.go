package decide

import (
	"errors"
	"strconv"
	"strings"
	"unsafe"

	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
)

// input is a decoded /decide or /flags body. Its strings view the parser's memory: they are
// valid until the scratch it belongs to is reused, and are copied wherever they are kept.
type input struct {
	token              string
	distinctID         string
	anonDistinctID     string
	deviceID           string
	groups             map[string]string
	personProperties   flags.Properties
	groupProperties    map[string]flags.Properties
	geoipDisable       bool
	disableFlags       bool
	flagKeysToEvaluate []string
	// runtime is the body's evaluation_runtime (RuntimeUnknown when it names none: the
	// headers tell); contexts its evaluation_contexts (or evaluation_environments).
	runtime  flags.Runtime
	contexts []string
	// selective is set once runtime is the request's (told from the headers when the body
	// names none) and the answer gives only the flags selection keeps: the engine then
	// treats a filter on a left-out flag as PostHog's server does (flags.Request.Selective).
	selective bool

	// values and groupMaps are memory reused across requests for the property values.
	values    values
	groupMaps []map[string]any
}

var errNotObject = errors.New("expected a JSON object")

// parse decodes body into s.in, reusing the scratch's scanner and maps: in one pass, taking
// the fields it knows as it meets them (in the body's order: of repeated fields, the last
// counts, and the first token), skipping the others. A body that is not valid JSON is an
// error, whatever it held before the error; so is one whose field has the wrong type where
// PostHog's server refuses it (after the body is read to its end, so that a syntax error wins).
func (s *scratch) parse(body []byte) error {
	in := &s.in
	*in = input{groups: in.groups, flagKeysToEvaluate: in.flagKeysToEvaluate[:0], contexts: in.contexts[:0],
		values: in.values.reset(), groupMaps: in.groupMaps}
	clear(s.person)
	clear(s.groupProps)
	clear(in.groups)
	if len(body) == 0 {
		return nil
	}
	sc := &s.scan
	sc.reset(body)
	if sc.peek() != kindObject {
		sc.skip(1)
		if err := sc.end(); err != nil {
			return err
		}
		return errNotObject
	}
	var firstErr error
	for more := sc.object(1); more && sc.err == nil; more = sc.next('}') {
		if err := s.field(sc, sc.key()); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if err := sc.end(); err != nil {
		return err
	}
	return firstErr
}

// field reads the value of the body's field key (at depth 2) into s.in, and returns the error
// of a value of the wrong type where that is an error.
func (s *scratch) field(sc *scanner, key string) error {
	const depth = 2
	in := &s.in
	switch key {
	case "token", "api_key", "$token":
		if t := stringOf(sc, depth); t != "" && in.token == "" {
			in.token = t
		}
	case "distinct_id":
		in.distinctID = idOf(sc, depth)
	case "$distinct_id": // an alias; distinct_id wins
		if id := idOf(sc, depth); in.distinctID == "" {
			in.distinctID = id
		}
	case "$anon_distinct_id", "anon_distinct_id":
		if id := idOf(sc, depth); id != "" {
			in.anonDistinctID = id
		}
	case "$device_id", "device_id":
		if id := idOf(sc, depth); id != "" {
			in.deviceID = id
		}
	case "person_properties":
		if sc.peek() != kindObject {
			sc.skip(depth)
			break
		}
		clear(s.person) // a repeated field: the last counts
		for more := sc.object(depth); more && sc.err == nil; more = sc.next('}') {
			k := sc.key()
			s.person[k] = in.values.read(sc, depth+1)
		}
		in.personProperties = s.person
	case "groups":
		if sc.peek() != kindObject {
			sc.skip(depth)
			break
		}
		if in.groups == nil {
			in.groups = map[string]string{}
		}
		for more := sc.object(depth); more && sc.err == nil; more = sc.next('}') {
			k := sc.key()
			if v := scalarOf(sc, depth+1); v != "" {
				in.groups[k] = v
			}
		}
	case "group_properties":
		if sc.peek() != kindObject {
			sc.skip(depth)
			break
		}
		clear(s.groupProps) // a repeated field: the last counts, and its maps are reused from the first
		n := 0
		for more := sc.object(depth); more && sc.err == nil; more = sc.next('}') {
			k := sc.key()
			if sc.peek() != kindObject {
				sc.skip(depth + 1)
				continue
			}
			if n == len(in.groupMaps) {
				in.groupMaps = append(in.groupMaps, map[string]any{})
			}
			m := in.groupMaps[n]
			n++
			clear(m)
			for more := sc.object(depth + 1); more && sc.err == nil; more = sc.next('}') {
				pk := sc.key()
				m[pk] = in.values.read(sc, depth+2)
			}
			s.groupProps[k] = m
		}
		in.groupProperties = s.groupProps
	case "geoip_disable":
		in.geoipDisable = truthy(sc, depth)
	case "disable_flags":
		in.disableFlags = truthy(sc, depth)
	case "flag_keys_to_evaluate", "flag_keys":
		switch sc.peek() {
		case kindArray:
			for more := sc.array(depth); more && sc.err == nil; more = sc.next(']') {
				if k := stringOf(sc, depth+1); k != "" {
					in.flagKeysToEvaluate = append(in.flagKeysToEvaluate, k)
				}
			}
		case kindNull:
			sc.skip(depth)
		default:
			sc.skip(depth)
			return errors.New("flag_keys_to_evaluate must be a list of strings")
		}
	case "evaluation_runtime":
		// As PostHog's server: a string names the runtime ("client", "server", else
		// "all"); null names none; anything else is a malformed body.
		switch sc.peek() {
		case kindString:
			_, t := sc.scalar(depth)
			in.runtime = flags.ParseRuntime(t)
		case kindNull:
			sc.skip(depth)
		default:
			sc.skip(depth)
			return errors.New("evaluation_runtime must be a string")
		}
	case "evaluation_contexts", "evaluation_environments":
		switch sc.peek() {
		case kindArray:
			// A list with anything but strings is an error, and the strings after it are
			// not read.
			var err error
			for more := sc.array(depth); more && sc.err == nil; more = sc.next(']') {
				k, t := sc.peek(), ""
				if k == kindString {
					_, t = sc.scalar(depth + 1)
				} else {
					sc.skip(depth + 1)
				}
				if err != nil {
					continue
				}
				if k != kindString {
					err = errors.New(key + " must be a list of strings")
					continue
				}
				in.contexts = append(in.contexts, t)
			}
			return err
		case kindNull:
			sc.skip(depth)
		default:
			sc.skip(depth)
			return errors.New(key + " must be a list of strings")
		}
	default:
		sc.skip(depth)
	}
	return nil
}

// bytesString views b as a string without copying.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// stringOf reads a value and returns it when it is a string, else "".
func stringOf(sc *scanner, depth int) string {
	if sc.peek() != kindString {
		sc.skip(depth)
		return ""
	}
	_, t := sc.scalar(depth)
	return t
}

// idOf reads a distinct id sent as a string or a number, cut to 200 characters, with NUL and
// invalid UTF-8 replaced, as capture stores it: the id is sent to the control plane and
// looked up in PostgreSQL, which take neither.
func idOf(sc *scanner, depth int) string {
	return event.CleanString(scalarOf(sc, depth), event.MaxIDRunes)
}

// scalarOf reads a value and returns the string form of a string or a number (as written),
// with NUL and invalid UTF-8 replaced; "" for other values.
func scalarOf(sc *scanner, depth int) string {
	switch sc.peek() {
	case kindString:
		_, t := sc.scalar(depth)
		return event.CleanString(t, 0)
	case kindNumber:
		if k, t := sc.scalar(depth); k == kindNumber {
			return strings.Clone(t) // kept beyond the request, as the group key or distinct id of a look-up
		}
		return ""
	}
	sc.skip(depth)
	return ""
}

// truthy reads a value: true, or a string strconv.ParseBool reads as true.
func truthy(sc *scanner, depth int) bool {
	switch sc.peek() {
	case kindTrue, kindString:
		k, t := sc.scalar(depth)
		if k == kindString {
			b, _ := strconv.ParseBool(t)
			return b
		}
		return k == kindTrue
	}
	sc.skip(depth)
	return false
}

// values holds the strings and numbers of a request's property values where the
// interfaces carrying them to the engine point: converting a string or a float64 to an
// interface allocates, about eight times per request. Like the parser's memory that the
// strings view, the slots are reused by the next request of the scratch.
type values struct {
	strs []string
	nums []float64
}

// eface is the layout of an interface{} value: its type and a pointer to the value.
type eface struct {
	typ, data unsafe.Pointer
}

var stringType, float64Type = typeOf(""), typeOf(0.0)

func typeOf(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

// reset makes the slots free for the next request.
func (vs values) reset() values { return values{strs: vs.strs[:0], nums: vs.nums[:0]} }

// read reads a JSON value (at depth) into the engine's property form.
func (vs *values) read(sc *scanner, depth int) any {
	switch sc.peek() {
	case kindArray:
		var out []any
		for more := sc.array(depth); more && sc.err == nil; more = sc.next(']') {
			out = append(out, vs.read(sc, depth+1))
		}
		if out == nil && sc.err == nil {
			out = []any{}
		}
		return out
	case kindObject:
		out := map[string]any{}
		for more := sc.object(depth); more && sc.err == nil; more = sc.next('}') {
			k := sc.key()
			out[k] = vs.read(sc, depth+1)
		}
		return out
	}
	switch k, t := sc.scalar(depth); k {
	case kindString:
		vs.strs = grown(vs.strs)
		vs.strs = append(vs.strs, t)
		return boxed(stringType, unsafe.Pointer(&vs.strs[len(vs.strs)-1]))
	case kindNumber:
		vs.nums = grown(vs.nums)
		vs.nums = append(vs.nums, number(t))
		return boxed(float64Type, unsafe.Pointer(&vs.nums[len(vs.nums)-1]))
	case kindTrue:
		return true
	case kindFalse:
		return false
	}
	return nil
}

// grown returns s with room for one more element. A full s is replaced, not grown: the
// interfaces made so far point into it and must keep their values.
func grown[T any](s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	return make([]T, 0, max(16, 2*cap(s)))
}

// boxed is the interface of type typ holding *data.
func boxed(typ, data unsafe.Pointer) any {
	var v any
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, data
	return v
}
