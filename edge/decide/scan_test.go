package decide

import (
	"math"
	"reflect"
	"testing"

	"github.com/valyala/fastjson"
)

// plain is v with the values read as fastjson reads them, comparable (NaN as a string).
func plain(v any) any {
	switch v := v.(type) {
	case string:
		return "s:" + v
	case float64:
		if math.IsNaN(v) {
			return "NaN"
		}
		return v
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = plain(v[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = plain(e)
		}
		return out
	}
	return v
}

// fastjsonValue is what fastjson reads v as, in the form plain gives.
func fastjsonValue(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeString:
		return "s:" + string(v.GetStringBytes())
	case fastjson.TypeNumber:
		f, _ := v.Float64()
		return plain(f)
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	case fastjson.TypeArray:
		arr, _ := v.Array()
		out := make([]any, len(arr))
		for i, e := range arr {
			out[i] = fastjsonValue(e)
		}
		return out
	case fastjson.TypeObject:
		o, _ := v.Object()
		out := map[string]any{}
		o.Visit(func(k []byte, e *fastjson.Value) { out[string(k)] = fastjsonValue(e) })
		return out
	}
	return nil
}

// The scanner accepts exactly the documents fastjson's parser accepts and reads their values
// as fastjson reads them: escapes (invalid ones kept), numbers (NaN and Inf too), repeated
// keys (the last counts), nesting up to fastjson's limit.
func FuzzScanner(f *testing.F) {
	for _, doc := range []string{
		`{"api_key":"phc_x","distinct_id":"d","person_properties":{"email":"a@b.c","age":31,"n":null,"t":true,"l":[1,"x",{}]}}`,
		` {"a":"\u00e9\ud83d\ude00\x\u12","b":"\"\\\/\b\f\n\r\t"} `, `[1,-2.5e3,NaN,-inf,+Inf,1-2,.5]`, `"s"`, `nan`, `-x`,
		`{"a":1,}`, `{"a" 1}`, `[1 2]`, `{"a":1}x`, ``, `  `, `{"a":tru}`, `{"a":nul}`, `{"a":"unterminated}`, `{"k\"q":1,"k\"q":2}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var p fastjson.Parser
		want, wantErr := p.ParseBytes(doc)
		var sc scanner
		var vs values
		sc.reset(doc)
		got := vs.read(&sc, 1)
		err := sc.end()
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: scanner error %v, fastjson's %v", doc, err, wantErr)
		}
		if err != nil {
			return
		}
		if w, g := fastjsonValue(want), plain(got); !reflect.DeepEqual(w, g) {
			t.Fatalf("%q: fastjson reads %#v, the scanner %#v", doc, w, g)
		}
	})
}

// Deep nesting is refused at fastjson's depth, not before.
func TestScannerDepth(t *testing.T) {
	for _, n := range []int{maxDepth, maxDepth + 1} {
		doc := make([]byte, 0, 2*n)
		for range n {
			doc = append(doc, '[')
		}
		for range n {
			doc = append(doc, ']')
		}
		var sc scanner
		var vs values
		sc.reset(doc)
		vs.read(&sc, 1)
		if err := sc.end(); (err != nil) != (n > maxDepth) {
			t.Errorf("depth %d: %v", n, err)
		}
	}
}
