package postgres

import (
	"encoding/json"
	"testing"
)

// TestEventPropertiesNumberAsBefore checks that reading a mean guardrail's value with one
// parse per event answers as decoding the properties into a map, then the value into a
// float64, did for each plan (repeated keys, strings, values out of range, escaped keys,
// properties that are not an object), except that null is no value: decoding null into a
// float64 left its starting value, so an event without the measurement counted as 1.
func TestEventPropertiesNumberAsBefore(t *testing.T) {
	before := func(raw json.RawMessage, name string) (float64, bool) {
		v := 1.0
		var props map[string]json.RawMessage
		if json.Unmarshal(raw, &props) != nil || string(props[name]) == "null" || json.Unmarshal(props[name], &v) != nil {
			return 0, false
		}
		return v, true
	}
	var p eventProperties
	for _, raw := range []string{
		`{"$duration": 120, "$load": 3.5}`,
		`{"$duration": 1, "$duration": 7}`,
		`{"$duration": null}`,
		`{"$duration": "120"}`,
		`{"$duration": 1e400}`,
		`{"$duration": -0.5e-3}`,
		`{"$duration": true}`,
		`{"$duration": [1]}`,
		`{"$duration": {"ms": 1}}`,
		`{"\u0024duration": 42}`,
		`{"$load": 2}`,
		`{}`,
		`[{"$duration": 1}]`,
		`null`,
		`12`,
		`{"$duration": 5, "nested": {"$duration": 9}}`,
	} {
		p.reset(json.RawMessage(raw))
		for range 2 { // the second answer comes from the event's cache
			for _, name := range []string{"$duration", "$load", ""} {
				want, wantOK := before(json.RawMessage(raw), name)
				got, ok := p.number(name)
				if ok != wantOK || (ok && got != want) {
					t.Errorf("%s, %q: got %v %v, want %v %v", raw, name, got, ok, want, wantOK)
				}
			}
		}
	}
}
