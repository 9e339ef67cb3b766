package event

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

func TestCleanJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":"plain","n":1.5e10,"t":true}`, `{"a":"plain","n":1.5e10,"t":true}`},
		{`{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{`{"x\u0000":1}`, `{"x\ufffd":1}`},
		{`{"a":"\ud800"}`, `{"a":"\ufffd"}`},
		{`{"a":"\udc00\ud800x"}`, `{"a":"\ufffd\ufffdx"}`},
		{`{"a":"\ud83d\ude00"}`, `{"a":"\ud83d\ude00"}`},
		{`{"a":"\\u0000"}`, `{"a":"\\u0000"}`}, // an escaped backslash, then text
		{"{\"a\":\"\xff\"}", "{\"a\":\"\uFFFD\"}"},
		{`{"n":1e200000}`, `{"n":"1e200000"}`},
		{`{"n":-1e-200000,"m":[1E400,2]}`, `{"n":"-1e-200000","m":["1E400",2]}`},
		{`{"n":0e999999}`, `{"n":0e999999}`}, // zero is in range
		{`{"s":"1e200000"}`, `{"s":"1e200000"}`},
		{`{"\0":"a\qb\u12"}`, `{"\\0":"a\\qb\\u12"}`},
		{"{\"a\":\"tab\there\x01\"}", `{"a":"tab\u0009here\u0001"}`},
		{`{"0":.,"a":[+1,.5,1.,-,1-2,NaN,-inf,null,0.5e-3,true,false,e5]}`, `{"0":".","a":["+1",".5","1.","-","1-2","NaN","-inf",null,0.5e-3,true,false,"e5"]}`},
	} {
		got := string(CleanJSON([]byte(c.in)))
		if got != c.want {
			t.Errorf("CleanJSON(%s) = %s, want %s", c.in, got, c.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("CleanJSON(%s) = %s: not JSON", c.in, got)
		}
	}
	clean := []byte(`{"event":"x","properties":{"a":"é"}}`)
	if out := CleanJSON(clean); &out[0] != &clean[0] {
		t.Error("CleanJSON copied a body that needed nothing")
	}
}

func TestCleanString(t *testing.T) {
	long := strings.Repeat("é", 250)
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"user-1", 200, "user-1"},
		{"a\x00b", 200, "a\uFFFDb"},
		{"a\xffb", 200, "a\uFFFDb"},
		{long, 200, strings.Repeat("é", 200)},
		{long, 0, long},
		{strings.Repeat("x", 199) + "€", 200, strings.Repeat("x", 199) + "€"}, // 201 bytes, 200 characters
	} {
		if got := CleanString(c.in, c.max); got != c.want {
			t.Errorf("CleanString(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

// storable checks what PostgreSQL requires of a jsonb text.
func storable(t *testing.T, out []byte) {
	t.Helper()
	if !utf8.Valid(out) {
		t.Fatalf("invalid UTF-8 in %q", out)
	}
	for i := 0; i < len(out); i++ {
		if out[i] == '\\' {
			size, kind := classifyEscape(out[i:])
			if kind != escapeValid {
				t.Fatalf("escape refused by jsonb at %d in %q", i, out)
			}
			i += size - 1
		}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case json.Number:
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				t.Fatalf("number %s out of range in %q", v, out)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
}

func FuzzCleanJSON(f *testing.F) {
	for _, s := range []string{`{"t":true,"f":false,"n":null,"x":[1e5,-0.5E+3]}`, `{"a":"x\u0000y"}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `[1e999,-1e-999,"\\u0000"]`, `{"a":"\ud83d\ude00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := CleanJSON(in)
		if again := CleanJSON(out); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		if json.Valid(in) {
			storable(t, out)
		}
	})
}

// FuzzParseCapture: whatever a capture body holds, every event ParseCapture returns is one
// PostgreSQL can store.
func FuzzParseCapture(f *testing.F) {
	for _, s := range []string{`{"api_key":"k","event":"e","distinct_id":"d","properties":{"a":"\u0000"}}`,
		"[{\"event\":\"\xff\",\"distinct_id\":\"\\ud800\",\"$set\":{\"n\":1e999}}]", `{"batch":[{"event":"e","properties":{"distinct_id":7}}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p fastjson.Parser
		payload, err := ParseCapture(&p, body)
		if err != nil {
			return
		}
		for _, e := range payload.Events {
			for _, s := range []string{e.Name, e.DistinctID} {
				if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || utf8.RuneCountInString(s) > MaxIDRunes {
					t.Fatalf("not storable: %q", s)
				}
			}
			storable(t, e.Properties)
			for _, set := range [][]byte{e.Set, e.SetOnce} {
				if set != nil {
					storable(t, set)
				}
			}
		}
	})
}
