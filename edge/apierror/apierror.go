// Package apierror is the edge's one error type for answers to SDKs and browsers: a status,
// the API's error type and code, a user-safe detail and, for field errors, the field. Handlers
// return these; the HTTP layer writes them in one place, in the API's error body.
package apierror

import "net/http"

// Error is an answer that is not a success. Its Detail is shown to the caller: it never holds
// an internal cause (those are logged where they happen).
type Error struct {
	Status int    // HTTP status
	Type   string // e.g. "validation_error", "authentication_error"
	Code   string // e.g. "invalid_api_key"
	Detail string // user-safe message
	Attr   string // the offending field; empty when none
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// The answers the edge gives, each written once here.
var (
	// NoAPIKey: a public endpoint was called without a project token.
	NoAPIKey = &Error{http.StatusUnauthorized, "authentication_error", "no_api_key",
		"No project API key provided. You can find your project API key in project settings.", ""}
	// InvalidAPIKey: the project token is unknown.
	InvalidAPIKey = &Error{http.StatusUnauthorized, "authentication_error", "invalid_api_key",
		"Project API key invalid. You can find your project API key in project settings.", ""}
	// MixedAPIKeys: the events of one capture request carry different project tokens.
	MixedAPIKeys = &Error{http.StatusUnauthorized, "authentication_error", "invalid_api_key",
		"Events of one request must carry the same project API key.", ""}
	// NotAuthenticated: an endpoint that needs a bearer credential got none.
	NotAuthenticated = &Error{http.StatusUnauthorized, "authentication_error", "not_authenticated",
		"Authentication credentials were not provided.", ""}
	// InvalidPersonalAPIKey: the bearer credential is unknown for the project.
	InvalidPersonalAPIKey = &Error{http.StatusUnauthorized, "authentication_error", "invalid_personal_api_key",
		"Personal API key found in request Authorization header is invalid.", ""}
	// MissingReadScope: the personal key may not read flag definitions.
	MissingReadScope = &Error{http.StatusForbidden, "authentication_error", "permission_denied",
		"API key missing required scope 'feature_flag:read'", ""}
	// InvalidProject: events sent with a personal API key name no project it reaches.
	InvalidProject = &Error{http.StatusBadRequest, "validation_error", "invalid_project",
		"Invalid Project ID: the project for these events cannot be determined.", "project_id"}
	// MissingDistinctID: /decide and /flags need to know whom they evaluate for.
	MissingDistinctID = &Error{http.StatusBadRequest, "validation_error", "missing_distinct_id",
		"Decide requires a distinct_id.", ""}
	// NotReady: the edge holds no snapshot yet and cannot check tokens. SDKs retry it.
	NotReady = &Error{http.StatusServiceUnavailable, "server_error", "fetch_team_fail",
		"Unable to fetch the project's flags yet.", ""}
	// CaptureUnavailable: the spool cannot take the events (its quota is reached). SDKs retry
	// it; nothing acknowledged is ever dropped.
	CaptureUnavailable = &Error{http.StatusServiceUnavailable, "server_error", "capture_unavailable",
		"The edge cannot accept events right now; retry later.", ""}
	// NotFound: no such path or object.
	NotFound = &Error{http.StatusNotFound, "invalid_request", "not_found", "Not found.", ""}
	// MethodNotAllowed: the path exists, the method does not.
	MethodNotAllowed = &Error{http.StatusMethodNotAllowed, "invalid_request", "method_not_allowed", "Method not allowed.", ""}
	// RequestTimeout: the client did not send its request in time.
	RequestTimeout = &Error{http.StatusRequestTimeout, "invalid_request", "request_timeout", "The request was not received in time.", ""}
	// Internal: a bug or a failure of the edge itself; the cause is in the log.
	Internal = &Error{http.StatusInternalServerError, "server_error", "error", "A server error occurred.", ""}
)

// Malformed is the answer to a body that cannot be decoded; cause says why, in words safe to
// show (decoder errors describe the input, not the server).
func Malformed(cause string) *Error {
	return &Error{http.StatusBadRequest, "validation_error", "invalid_payload", "Malformed request data: " + cause, ""}
}

// TooLarge is the answer to a body or an event over its limit; detail names the limit.
func TooLarge(detail string) *Error {
	return &Error{http.StatusRequestEntityTooLarge, "invalid_request", "request_too_large", detail, ""}
}
