package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flagedge/flagedge/controlplane"
)

// TestOpErrorMapsDataErrors checks the storage layer's SQLSTATE mapping: a value PostgreSQL
// refuses for what it is (classes 22 and 54) is controlplane.ErrUnstorable, with the cause
// kept; a failure of the database stays internal.
func TestOpErrorMapsDataErrors(t *testing.T) {
	for _, tc := range []struct {
		code string
		want controlplane.Kind
	}{
		{"22021", controlplane.Invalid}, // invalid byte sequence (a NUL in text)
		{"22P05", controlplane.Invalid},
		{"54000", controlplane.Invalid}, // a value too long for an index
		{"08006", controlplane.Internal},
		{"40P01", controlplane.Internal},
	} {
		cause := &pgconn.PgError{Code: tc.code}
		err := opError("update flag", cause)
		if got := controlplane.ErrorKind(err); got != tc.want {
			t.Errorf("%s: kind %d, want %d", tc.code, got, tc.want)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tc.code {
			t.Errorf("%s: the cause is lost: %v", tc.code, err)
		}
	}
}
