package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sqlStateError carries a SQLSTATE as the database driver's errors do.
type sqlStateError string

func (e sqlStateError) Error() string    { return "SQLSTATE " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

// TestDataErrorIsNotServerError checks the safety net behind the boundary checks: a value
// the database refuses for what it is answers 400, a database failure still 500.
func TestDataErrorIsNotServerError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		code   string
		status int
		body   errorBody
	}{
		{"22P05", 400, errorBody{Type: "validation_error", Code: "invalid_input", Detail: "The request holds a value that cannot be stored."}},
		{"54000", 400, errorBody{Type: "validation_error", Code: "invalid_input", Detail: "The request holds a value that cannot be stored."}},
		{"08006", 500, errorBody{Type: "server_error", Code: "error", Detail: "A server error occurred."}},
		{"40P01", 500, errorBody{Type: "server_error", Code: "error", Detail: "A server error occurred."}},
	} {
		t.Run(tc.code, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, log, httptest.NewRequest("GET", "/", nil), fmt.Errorf("find: %w", sqlStateError(tc.code)))
			var got errorBody
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status {
				t.Errorf("status %d, want %d", w.Code, tc.status)
			}
			if diff := cmp.Diff(tc.body, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}
