package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// errorBody is the API's error shape.
type errorBody struct {
	Type   string  `json:"type"`
	Code   string  `json:"code"`
	Detail string  `json:"detail"`
	Attr   *string `json:"attr"`
}

// writeError answers with the API error for err. Internal errors are logged and answered
// with a generic message: their cause never reaches the client.
func writeError(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	var e *controlplane.Error
	if !errors.As(err, &e) && isDataError(err) {
		// The boundary checks should have refused the value; answer what it is, a bad
		// input, rather than a server error, and log it so the check can be added.
		log.Warn("database refused a request's value", "method", r.Method, "path", r.URL.Path, "err", err)
		e = controlplane.Errorf(controlplane.Invalid, "invalid_input", "The request holds a value that cannot be stored.")
	}
	if e == nil || e.Kind == controlplane.Internal {
		log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Type: "server_error", Code: "error", Detail: "A server error occurred."})
		return
	}
	body := errorBody{Code: e.Code, Detail: e.Detail}
	if e.Attr != "" {
		body.Attr = &e.Attr
	}
	status := http.StatusBadRequest
	switch e.Kind {
	case controlplane.Invalid, controlplane.Malformed:
		body.Type = "validation_error"
	case controlplane.NotAuthenticated, controlplane.BadCredentials:
		status, body.Type = http.StatusUnauthorized, "authentication_error"
	case controlplane.Forbidden:
		status, body.Type = http.StatusForbidden, "authentication_error"
	case controlplane.NotFound:
		status, body.Type = http.StatusNotFound, "invalid_request"
	case controlplane.TooLarge:
		status, body.Type = http.StatusRequestEntityTooLarge, "invalid_request"
	}
	writeJSON(w, status, body)
}

// isDataError reports whether err is the database refusing a value for what it is
// (SQLSTATE class 22, data exception, or 54, program limit exceeded, such as a value too
// long for an index), as opposed to the database failing.
func isDataError(err error) bool {
	var se interface{ SQLState() string }
	if !errors.As(err, &se) {
		return false
	}
	code := se.SQLState()
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "54")
}

// writeJSON writes v as the JSON body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}
