package controlplane

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Kind classifies an Error; the HTTP layer maps each kind to a status code.
type Kind int

// The error kinds. Internal is the zero value so that an unclassified error is never shown.
const (
	Internal         Kind = iota // a bug or an unreachable dependency; details stay in the log
	Invalid                      // the request is well-formed but a field is wrong
	Malformed                    // the body is not JSON of the expected top-level shape
	NotAuthenticated             // no credentials were given
	BadCredentials               // the credentials given are unknown
	Forbidden                    // the credentials may not do this
	NotFound                     // the addressed object does not exist for this caller
	TooLarge                     // the body is over the size limit
	Conflict                     // the request conflicts with the object's state (a gated change)
)

// Error is the one error type of the control plane: a kind, an API error code, a user-safe
// message and, for field errors, the field it concerns.
type Error struct {
	Kind   Kind
	Code   string // API error code, e.g. "invalid_key" or "unique"
	Detail string // user-safe message
	Attr   string // the offending field; empty when none
}

func (e *Error) Error() string {
	if e.Attr != "" {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Attr, e.Detail)
	}
	return e.Code + ": " + e.Detail
}

// Errorf returns an Error of the given kind and code with a formatted message.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// FieldError returns an Invalid error about one field.
func FieldError(attr, code, detail string) *Error {
	return &Error{Kind: Invalid, Code: code, Detail: detail, Attr: attr}
}

// ErrNotFound is returned when the addressed object does not exist (or is not visible).
var ErrNotFound = &Error{Kind: NotFound, Code: "not_found", Detail: "Not found."}

// ErrNotAuthenticated is returned when a call names no user (no credentials).
var ErrNotAuthenticated = &Error{Kind: NotAuthenticated, Code: "not_authenticated", Detail: "Authentication credentials were not provided."}

// ErrPermissionDenied is returned when the caller may not modify the object.
var ErrPermissionDenied = &Error{Kind: Forbidden, Code: "permission_denied", Detail: "You do not have permission to perform this action."}

// ErrUnstorable is returned when the database refuses a value for what it is (text it cannot
// hold, a value too long for an index) that the boundary checks let through: a bad input,
// not a server error.
var ErrUnstorable = &Error{Kind: Invalid, Code: "invalid_input", Detail: "The request holds a value that cannot be stored."}

// ErrKeyConflict is returned when a flag key is already taken in the project.
var ErrKeyConflict = FieldError("key", "unique", "There is already a feature flag with this key.")

// ErrorKind returns the kind of err: that of the first *Error in its chain, else Internal.
func ErrorKind(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// TextProblem says why s cannot be stored as text (PostgreSQL refuses a NUL character and
// invalid UTF-8 with SQLSTATE 22021), or is "" when it can: every input from outside is
// checked with it before it reaches a store.
func TextProblem(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "NUL characters are not allowed."
	}
	if !utf8.ValidString(s) {
		return "Must be valid UTF-8 text."
	}
	return ""
}
