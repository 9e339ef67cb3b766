package httpapi_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane/httpapi"
)

// panicky is a console whose one route panics.
type panicky struct{}

func (panicky) Route(r *http.Request) string {
	if r.URL.Path == "/boom" {
		return "GET /boom"
	}
	return "console_unmatched"
}

func (panicky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/boom" {
		var s []int
		_ = s[-len(r.URL.Path)+4] // index out of range, as a form index once was
	}
	w.WriteHeader(http.StatusNotFound)
}

// TestConsolePanicRecovered: a console handler's panic is answered 500 with a request id that
// the log line has too, and counted with the console's answers.
func TestConsolePanicRecovered(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	api := httpapi.New(httpapi.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registry: reg})
	srv := httptest.NewServer(api.WithConsole(panicky{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != 500 || len(id) != 16 || !strings.Contains(string(body), id) {
		t.Errorf("panicking console route: %d, X-Request-Id %q, body %q; want 500 naming the request id", resp.StatusCode, id, body)
	}
	if !strings.Contains(logs.String(), "request_id="+id) || !strings.Contains(logs.String(), "index out of range") {
		t.Errorf("the log does not have the panic with its request id:\n%s", logs.String())
	}
	if resp, err := http.Get(srv.URL + "/elsewhere"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("another path: %v %v", resp, err)
	}
	counts := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += " " + lp.GetName() + "=" + lp.GetValue()
			}
			counts[key] = m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"flagedge_controlplane_http_requests_total code=500 route=GET /boom":         1,
		"flagedge_controlplane_http_requests_total code=404 route=console_unmatched": 1,
		"flagedge_controlplane_http_panics_total":                                    1,
	} {
		if counts[key] != want {
			t.Errorf("%s = %v, want %v", key, counts[key], want)
		}
	}
}
