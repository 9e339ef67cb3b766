package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

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
	if errors.Is(err, controlplane.ErrUnstorable) {
		// The store found the value unstorable (postgres maps the SQLSTATE): the boundary
		// checks should have refused it; log it so the check can be added.
		log.Warn("database refused a request's value", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status, body, ok := gateErrorBody(err); ok { // the approval gate's answers: PostHog's bodies
		writeJSON(w, status, body)
		return
	}
	if !errors.As(err, &e) || e == nil || e.Kind == controlplane.Internal {
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
	case controlplane.Conflict:
		status, body.Type = http.StatusConflict, "invalid_request"
	case controlplane.TooLarge:
		status, body.Type = http.StatusRequestEntityTooLarge, "invalid_request"
	}
	writeJSON(w, status, body)
}

// writeJSON writes v as the JSON body with the given status, HTML characters unescaped and
// json.Encoder's trailing newline included. Only respond (the handlers' answers) and
// writeError call it, so every answer is encoded alike: TestOnlyRespondWritesJSON holds that.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}
