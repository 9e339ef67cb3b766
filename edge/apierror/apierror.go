// Package apierror is the edge's one error type for answers to SDKs and browsers: a status,
// the API's error type and code, a user-safe detail and, for field errors, the field. Handlers
// return these; the HTTP layer writes them in one place, in the API's error body.
package apierror

import (
	"net/http"
	"strconv"
	"time"
)

// Error is an answer that is not a success. Its Detail is shown to the caller: it never holds
// an internal cause (those are logged where they happen).
type Error struct {
	Status int    // HTTP status
	Type   string // e.g. "validation_error", "authentication_error"
	Code   string // e.g. "invalid_api_key"
	Detail string // user-safe message
	Attr   string // the offending field; empty when none
	// RetryAfter, when positive, is sent as the Retry-After header (in whole seconds, at
	// least 1): when a refused request (429, 503) may be tried again.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// The answers the edge gives, each written once here.
var (
	// NoAPIKey: a public endpoint was called without a project token.
	NoAPIKey = &Error{http.StatusUnauthorized, "authentication_error", "no_api_key",
		"No project API key provided. You can find your project API key in project settings.", "", 0}
	// InvalidAPIKey: the project token is unknown.
	InvalidAPIKey = &Error{http.StatusUnauthorized, "authentication_error", "invalid_api_key",
		"Project API key invalid. You can find your project API key in project settings.", "", 0}
	// MixedAPIKeys: the events of one capture request carry different project tokens.
	MixedAPIKeys = &Error{http.StatusUnauthorized, "authentication_error", "invalid_api_key",
		"Events of one request must carry the same project API key.", "", 0}
	// NotAuthenticated: an endpoint that needs a bearer credential got none.
	NotAuthenticated = &Error{http.StatusUnauthorized, "authentication_error", "not_authenticated",
		"Authentication credentials were not provided.", "", 0}
	// InvalidPersonalAPIKey: the bearer credential is unknown for the project.
	InvalidPersonalAPIKey = &Error{http.StatusUnauthorized, "authentication_error", "invalid_personal_api_key",
		"Personal API key found in request Authorization header is invalid.", "", 0}
	// MissingReadScope: the personal key may not read flag definitions.
	MissingReadScope = &Error{http.StatusForbidden, "authentication_error", "permission_denied",
		"API key missing required scope 'feature_flag:read'", "", 0}
	// InvalidProject: events sent with a personal API key name no project it reaches.
	InvalidProject = &Error{http.StatusBadRequest, "validation_error", "invalid_project",
		"Invalid Project ID: the project for these events cannot be determined.", "project_id", 0}
	// MissingDistinctID: /decide and /flags need to know whom they evaluate for.
	MissingDistinctID = &Error{http.StatusBadRequest, "validation_error", "missing_distinct_id",
		"Decide requires a distinct_id.", "", 0}
	// NotReady: the edge holds no snapshot yet and cannot check tokens. SDKs retry it.
	NotReady = &Error{http.StatusServiceUnavailable, "server_error", "fetch_team_fail",
		"Unable to fetch the project's flags yet.", "", 0}
	// CaptureUnavailable: the spool cannot take the events (its quota is reached). SDKs retry
	// it; nothing acknowledged is ever dropped.
	CaptureUnavailable = &Error{http.StatusServiceUnavailable, "server_error", "capture_unavailable",
		"The edge cannot accept events right now; retry later.", "", 0}
	// Busy: the bytes held by requests in flight stayed at --max-inflight-bytes for the whole
	// wait; the request was not read. SDKs retry it.
	Busy = &Error{http.StatusServiceUnavailable, "server_error", "busy",
		"The edge is busy; retry later.", "", time.Second}
	// NotFound: no such path or object.
	NotFound = &Error{http.StatusNotFound, "invalid_request", "not_found", "Not found.", "", 0}
	// MethodNotAllowed: the path exists, the method does not.
	MethodNotAllowed = &Error{http.StatusMethodNotAllowed, "invalid_request", "method_not_allowed", "Method not allowed.", "", 0}
	// RequestTimeout: the client did not send its request in time.
	RequestTimeout = &Error{http.StatusRequestTimeout, "invalid_request", "request_timeout", "The request was not received in time.", "", 0}
	// Internal: a bug or a failure of the edge itself; the cause is in the log.
	Internal = &Error{http.StatusInternalServerError, "server_error", "error", "A server error occurred.", "", 0}
)

// Malformed is the answer to a body that cannot be decoded; cause says why, in words safe to
// show (decoder errors describe the input, not the server).
func Malformed(cause string) *Error {
	return &Error{http.StatusBadRequest, "validation_error", "invalid_payload", "Malformed request data: " + cause, "", 0}
}

// TooLarge is the answer to a body or an event over its limit; detail names the limit.
func TooLarge(detail string) *Error {
	return &Error{http.StatusRequestEntityTooLarge, "invalid_request", "request_too_large", detail, "", 0}
}

// RateLimited is the answer to a request over a rate limit; retryAfter is when the next
// one would be allowed. The body is the one PostHog's API throttles with.
func RateLimited(retryAfter time.Duration) *Error {
	return &Error{http.StatusTooManyRequests, "throttled_error", "throttled",
		"Request was throttled. Expected available in " + strconv.Itoa(seconds(retryAfter)) + " seconds.", "", retryAfter}
}

// RetryAfterSeconds is the Retry-After header's value for e: whole seconds, at least 1.
func (e *Error) RetryAfterSeconds() int { return seconds(e.RetryAfter) }

func seconds(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }
