package ofrep

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/edge/reqbody"
)

// FuzzParseRequest: any body, admitted within /flags's limits and then parsed (readContext),
// gives either a context with a distinct id, a 400 in OFREP's terms or a 413 PARSE_ERROR over
// a limit, never a panic, and nothing stays reserved once the lease is released. The body is
// read twice: as sent, and padded past the 4 KiB up to which bodies are not scanned with
// trailing space (which JSON ignores), so that every input goes through the limits' scan too;
// padded, it reads as sent unless it is over a limit.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"context":{"targetingKey":"u","email":"a@b.c","groups":{"company":"acme"},"groupProperties":{"company":{"seats":3}}}}`,
		`{"context":{"targetingKey":12,"geoipDisable":true,"nested":{"a":[1,{"b":null}]}}}`,
		`{"context":{"groups":{"company":[1]}}}`, `{"context":null}`, `{"context":[]}`, `[]`, `{`, ``, `{"context":{"targetingKey":"\u0000\ud800"}}`,
		// Nested too deep once scanned; brackets in strings, which the scan must not count.
		`{"context":{"targetingKey":"u","p":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}`,
		`{"context":{"targetingKey":"u","l":[1,"\"]",{"}":[]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	budget := reqbody.NewBudget(1 << 20)
	read := func(t *testing.T, body []byte) (string, error) {
		lease := budget.Lease()
		c, err := readContext(body, &lease)
		lease.Release()
		if held := budget.Held(); held != 0 {
			t.Fatalf("%q: %d bytes held after the release", body, held)
		}
		var e *Error
		switch {
		case err == nil && c.DistinctID == "":
			t.Fatalf("%q: a context without a distinct id", body)
		case err == nil:
			return c.DistinctID, nil
		case !errors.As(err, &e):
			t.Fatalf("%q: %v", body, err)
		case e.Status == http.StatusBadRequest && (e.Code == codeParse || e.Code == codeInvalidCtx || e.Code == codeTargetingKey):
		case e.Status == http.StatusRequestEntityTooLarge && e.Code == codeParse && len(body) > 4<<10:
		default:
			t.Fatalf("%q: %v", body, err)
		}
		return "", err
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, err := read(t, body)
		padded := append(bytes.Clone(body), bytes.Repeat([]byte{' '}, 4<<10+1)...)
		paddedID, paddedErr := read(t, padded)
		var e *Error
		if errors.As(paddedErr, &e) && e.Status == http.StatusRequestEntityTooLarge {
			return
		}
		if (err == nil) != (paddedErr == nil) || id != paddedID {
			t.Fatalf("%q: %q, %v as sent; %q, %v padded", body, id, err, paddedID, paddedErr)
		}
	})
}
