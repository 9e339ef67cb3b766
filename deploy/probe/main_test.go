package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_ready" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tls.Close()

	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"healthy", []string{srv.URL + "/_health"}, 0},
		{"not ready", []string{srv.URL + "/_ready"}, 1},
		{"refused", []string{"http://127.0.0.1:1/_health"}, 1},
		{"untrusted certificate", []string{tls.URL + "/_health"}, 1},
		{"insecure skips verification", []string{"-insecure", tls.URL + "/_health"}, 0},
		{"no URL", nil, 2},
		{"unknown flag", []string{"-x", srv.URL}, 2},
	} {
		if got := run(tc.args, io.Discard); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}
