package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// maxBodyBytes bounds management request bodies; flags and annotations are small, and 2 MiB
// leaves room for large filter definitions.
const maxBodyBytes = 2 << 20

var errTooLarge = &controlplane.Error{Kind: controlplane.TooLarge, Code: "request_too_large", Detail: "The request body is too large."}

// fields is a decoded JSON object body, read field by field so that a wrongly typed field is
// reported with its name.
type fields map[string]json.RawMessage

// decodeObject reads the body, at most maxBodyBytes of it, as a JSON object. It limits the
// read itself: http.MaxBytesReader would need the ResponseWriter, which handlers do not get,
// and uses it only to have net/http close the connection after the body, which the
// statusWriter that every request is served through hides from it anyway.
func decodeObject(r *http.Request) (fields, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, controlplane.Errorf(controlplane.Malformed, "invalid_payload", "Malformed request data: %v", err)
	}
	if len(body) > maxBodyBytes {
		return nil, errTooLarge
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return fields{}, nil
	}
	var f fields
	if err := json.Unmarshal(body, &f); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, controlplane.Errorf(controlplane.Malformed, "invalid_payload", "Malformed request data: expected a JSON object, got %s.", typeErr.Value)
		}
		return nil, controlplane.Errorf(controlplane.Malformed, "invalid_payload", "Malformed request data: %v", err)
	}
	if f == nil { // the body was JSON null
		return nil, controlplane.Errorf(controlplane.Malformed, "invalid_payload", "Malformed request data: expected a JSON object, got null.")
	}
	if attr, problem, ok := jsonTextProblem(body); !ok {
		return nil, controlplane.FieldError(attr, "invalid_input", problem)
	}
	return f, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func typeError(name, detail string) error {
	return controlplane.FieldError(name, "invalid_input", detail)
}

// decode reads field name into *dst when present; null and wrong types are field errors.
func decode[T any](f fields, name string, dst **T, what string) error {
	raw, ok := f[name]
	if !ok {
		return nil
	}
	if isNull(raw) {
		return typeError(name, "This field may not be null.")
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return typeError(name, fmt.Sprintf("Must be %s.", what))
	}
	*dst = v
	return nil
}

func (f fields) str(name string, dst **string) error { return decode(f, name, dst, "a valid string") }
func (f fields) boolean(name string, dst **bool) error {
	return decode(f, name, dst, "a valid boolean")
}
func (f fields) strings(name string, dst **[]string) error {
	return decode(f, name, dst, "a list of strings")
}
func (f fields) ints(name string, dst **[]int64) error {
	return decode(f, name, dst, "a list of integers")
}

// memberIDs reads field name, a list of ids to add to a static cohort, counting its elements
// against *left (of controlplane.MaxStaticCohortAdd for the request) as it decodes them: one
// more than are left is refused at once, so a long list is never decoded whole (the body
// itself is bounded by the API's body limit). What is left is written back, so that the
// request's lists share the maximum.
func (f fields) memberIDs(name string, left *int) ([]string, error) {
	raw, ok := f[name]
	if !ok {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	notList := typeError(name, "Must be a list of strings.")
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, notList
	}
	var out []string
	for dec.More() {
		if *left == 0 {
			return nil, controlplane.FieldError(name, "max_length", fmt.Sprintf("At most %d ids can be added at once.", controlplane.MaxStaticCohortAdd))
		}
		tok, err := dec.Token()
		s, isString := tok.(string)
		if err != nil || !isString {
			return nil, notList
		}
		out = append(out, s)
		*left--
	}
	return out, nil
}

// object reads a field that must be a JSON object.
func (f fields) object(name string, dst *json.RawMessage) error {
	raw, ok := f[name]
	if !ok {
		return nil
	}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || trimmed[0] != '{' {
		return typeError(name, "Must be a JSON object.")
	}
	*dst = raw
	return nil
}

// anyJSON reads a field of any JSON type, null included.
func (f fields) anyJSON(name string, dst *json.RawMessage) {
	if raw, ok := f[name]; ok {
		*dst = raw
	}
}

// datetime reads an ISO 8601 date-time field.
func (f fields) datetime(name string, dst **time.Time) error {
	var s *string
	if err := f.str(name, &s); err != nil || s == nil {
		return err
	}
	t, err := parseISOTime(*s)
	if err != nil {
		return controlplane.FieldError(name, "invalid_date", "Datetime has wrong format. Use ISO 8601.")
	}
	*dst = &t
	return nil
}

var isoLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999", "2006-01-02T15:04Z07:00", "2006-01-02T15:04", "2006-01-02"}

// parseISOTime parses an ISO 8601 date or date-time; without an offset it is UTC.
func parseISOTime(s string) (time.Time, error) {
	for _, layout := range isoLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("not an ISO 8601 time: %q", s)
}
