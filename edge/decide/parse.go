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
	groups             map[string]string
	personProperties   flags.Properties
	groupProperties    map[string]flags.Properties
	geoipDisable       bool
	disableFlags       bool
	flagKeysToEvaluate []string
}

var errNotObject = errors.New("expected a JSON object")

// parse decodes body into s.in, reusing the scratch's parser and maps.
func (s *scratch) parse(body []byte) error {
	in := &s.in
	*in = input{groups: s.in.groups, flagKeysToEvaluate: s.in.flagKeysToEvaluate[:0]}
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
		case "$anon_distinct_id":
			in.anonDistinctID = idOf(v)
		case "person_properties":
			if o, err := v.Object(); err == nil {
				o.Visit(func(k []byte, pv *fastjson.Value) { s.person[bytesString(k)] = valueOf(pv) })
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
				o.Visit(func(k []byte, gv *fastjson.Value) {
					if props, ok := valueOf(gv).(map[string]any); ok {
						s.groupProps[bytesString(k)] = props
					}
				})
				in.groupProperties = s.groupProps
			}
		case "geoip_disable":
			in.geoipDisable = truthy(v)
		case "disable_flags":
			in.disableFlags = truthy(v)
		case "flag_keys_to_evaluate":
			if arr, err := v.Array(); err == nil {
				for _, k := range arr {
					if key := stringOf(k); key != "" {
						in.flagKeysToEvaluate = append(in.flagKeysToEvaluate, key)
					}
				}
			} else if v.Type() != fastjson.TypeNull && firstErr == nil {
				firstErr = errors.New("flag_keys_to_evaluate must be a list of strings")
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

// valueOf converts a JSON value into the engine's property form.
func valueOf(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeString:
		return bytesString(v.GetStringBytes())
	case fastjson.TypeNumber:
		f, _ := v.Float64()
		return f
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	case fastjson.TypeArray:
		arr, _ := v.Array()
		out := make([]any, len(arr))
		for i, e := range arr {
			out[i] = valueOf(e)
		}
		return out
	case fastjson.TypeObject:
		o, _ := v.Object()
		out := make(map[string]any, o.Len())
		o.Visit(func(k []byte, e *fastjson.Value) { out[bytesString(k)] = valueOf(e) })
		return out
	}
	return nil
}
