package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane"
)

// sqlStateError carries a SQLSTATE as the database driver's errors do.
type sqlStateError string

func (e sqlStateError) Error() string { return "SQLSTATE " + string(e) }

// TestDataErrorIsNotServerError checks the safety net behind the boundary checks: a value
// the store found unstorable (controlplane.ErrUnstorable, as postgres maps SQLSTATE classes
// 22 and 54) answers 400; any other database failure 500.
func TestDataErrorIsNotServerError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		code   string
		status int
		body   errorBody
	}{
		{"unstorable 22P05", 400, errorBody{Type: "validation_error", Code: "invalid_input", Detail: "The request holds a value that cannot be stored."}},
		{"unstorable 54000", 400, errorBody{Type: "validation_error", Code: "invalid_input", Detail: "The request holds a value that cannot be stored."}},
		{"08006", 500, errorBody{Type: "server_error", Code: "error", Detail: "A server error occurred."}},
		{"40P01", 500, errorBody{Type: "server_error", Code: "error", Detail: "A server error occurred."}},
	} {
		t.Run(tc.code, func(t *testing.T) {
			w := httptest.NewRecorder()
			err := fmt.Errorf("find: %w", sqlStateError(tc.code))
			if code, ok := strings.CutPrefix(tc.code, "unstorable "); ok {
				err = fmt.Errorf("find: %w: %w", controlplane.ErrUnstorable, sqlStateError(code))
			}
			writeError(w, log, httptest.NewRequest("GET", "/", nil), err)
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
