package ofrep

import (
	"errors"
	"net/http"
	"testing"
)

// FuzzParseRequest: any body gives either a context with a distinct id or a 400 in OFREP's
// terms, never a panic.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"context":{"targetingKey":"u","email":"a@b.c","groups":{"company":"acme"},"groupProperties":{"company":{"seats":3}}}}`,
		`{"context":{"targetingKey":12,"geoipDisable":true,"nested":{"a":[1,{"b":null}]}}}`,
		`{"context":{"groups":{"company":[1]}}}`, `{"context":null}`, `{"context":[]}`, `[]`, `{`, ``, `{"context":{"targetingKey":"\u0000\ud800"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseRequest(body)
		if err == nil {
			if c.DistinctID == "" {
				t.Fatalf("%q: a context without a distinct id", body)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || (e.Code != codeParse && e.Code != codeInvalidCtx && e.Code != codeTargetingKey) {
			t.Fatalf("%q: %v", body, err)
		}
	})
}
