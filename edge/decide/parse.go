package decide

import (
	"errors"
	"strconv"
	"unsafe"

	"github.com/valyala/fastjson"

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

// parse decodes body into s.in, reusing the scratch's parser and maps.
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
	v, err := s.parser.ParseBytes(body)
	if err != nil {
		return err
	}
	obj, err := v.Object()
	if err != nil {
		return errNotObject
	}
	var firstErr error
	obj.Visit(func(key []byte, v *fastjson.Value) {
		switch string(key) {
		case "token", "api_key", "$token":
			if t := stringOf(v); t != "" && in.token == "" {
				in.token = t
			}
		case "distinct_id":
			in.distinctID = idOf(v)
		case "$distinct_id": // an alias; distinct_id wins
			if in.distinctID == "" {
				in.distinctID = idOf(v)
			}
		case "$anon_distinct_id", "anon_distinct_id":
			if id := idOf(v); id != "" {
				in.anonDistinctID = id
			}
		case "$device_id", "device_id":
			if id := idOf(v); id != "" {
				in.deviceID = id
			}
		case "person_properties":
			if o, err := v.Object(); err == nil {
				o.Visit(func(k []byte, pv *fastjson.Value) { s.person[bytesString(k)] = in.values.of(pv) })
				in.personProperties = s.person
			}
		case "groups":
			if o, err := v.Object(); err == nil {
				if in.groups == nil {
					in.groups = map[string]string{}
				}
				o.Visit(func(k []byte, gv *fastjson.Value) {
					if key := scalarOf(gv); key != "" {
						in.groups[bytesString(k)] = key
					}
				})
			}
		case "group_properties":
			if o, err := v.Object(); err == nil {
				n := 0
				o.Visit(func(k []byte, gv *fastjson.Value) {
					props, err := gv.Object()
					if err != nil {
						return
					}
					if n == len(in.groupMaps) {
						in.groupMaps = append(in.groupMaps, map[string]any{})
					}
					m := in.groupMaps[n]
					n++
					clear(m)
					props.Visit(func(pk []byte, pv *fastjson.Value) { m[bytesString(pk)] = in.values.of(pv) })
					s.groupProps[bytesString(k)] = m
				})
				in.groupProperties = s.groupProps
			}
		case "geoip_disable":
			in.geoipDisable = truthy(v)
		case "disable_flags":
			in.disableFlags = truthy(v)
		case "flag_keys_to_evaluate", "flag_keys":
			if arr, err := v.Array(); err == nil {
				for _, k := range arr {
					if key := stringOf(k); key != "" {
						in.flagKeysToEvaluate = append(in.flagKeysToEvaluate, key)
					}
				}
			} else if v.Type() != fastjson.TypeNull && firstErr == nil {
				firstErr = errors.New("flag_keys_to_evaluate must be a list of strings")
			}
		case "evaluation_runtime":
			// As PostHog's server: a string names the runtime ("client", "server", else
			// "all"); null names none; anything else is a malformed body.
			switch v.Type() {
			case fastjson.TypeString:
				in.runtime = flags.ParseRuntime(bytesString(v.GetStringBytes()))
			case fastjson.TypeNull:
			default:
				if firstErr == nil {
					firstErr = errors.New("evaluation_runtime must be a string")
				}
			}
		case "evaluation_contexts", "evaluation_environments":
			arr, err := v.Array()
			if err != nil {
				if v.Type() != fastjson.TypeNull && firstErr == nil {
					firstErr = errors.New(string(key) + " must be a list of strings")
				}
				return
			}
			for _, c := range arr {
				if c.Type() != fastjson.TypeString {
					if firstErr == nil {
						firstErr = errors.New(string(key) + " must be a list of strings")
					}
					return
				}
				in.contexts = append(in.contexts, bytesString(c.GetStringBytes()))
			}
		}
	})
	return firstErr
}

// bytesString views b as a string without copying.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func stringOf(v *fastjson.Value) string {
	if v.Type() != fastjson.TypeString {
		return ""
	}
	return bytesString(v.GetStringBytes())
}

// idOf reads a distinct id sent as a string or a number, cut to 200 characters, with NUL and
// invalid UTF-8 replaced, as capture stores it: the id is sent to the control plane and
// looked up in PostgreSQL, which take neither.
func idOf(v *fastjson.Value) string {
	return event.CleanString(scalarOf(v), event.MaxIDRunes)
}

// scalarOf is the string form of a string or a number, with NUL and invalid UTF-8 replaced.
func scalarOf(v *fastjson.Value) string {
	switch v.Type() {
	case fastjson.TypeString:
		return event.CleanString(bytesString(v.GetStringBytes()), 0)
	case fastjson.TypeNumber:
		return string(v.MarshalTo(nil))
	}
	return ""
}

func truthy(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeString:
		b, _ := strconv.ParseBool(bytesString(v.GetStringBytes()))
		return b
	}
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

// of converts a JSON value into the engine's property form.
func (vs *values) of(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeString:
		vs.strs = grown(vs.strs)
		vs.strs = append(vs.strs, bytesString(v.GetStringBytes()))
		return boxed(stringType, unsafe.Pointer(&vs.strs[len(vs.strs)-1]))
	case fastjson.TypeNumber:
		f, _ := v.Float64()
		vs.nums = grown(vs.nums)
		vs.nums = append(vs.nums, f)
		return boxed(float64Type, unsafe.Pointer(&vs.nums[len(vs.nums)-1]))
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	case fastjson.TypeArray:
		arr, _ := v.Array()
		out := make([]any, len(arr))
		for i, e := range arr {
			out[i] = vs.of(e)
		}
		return out
	case fastjson.TypeObject:
		o, _ := v.Object()
		out := make(map[string]any, o.Len())
		o.Visit(func(k []byte, e *fastjson.Value) { out[bytesString(k)] = vs.of(e) })
		return out
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
