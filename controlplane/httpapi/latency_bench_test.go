package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/flagedge/flagedge/controlplane/httpapi/httpapitest"
)

// BenchmarkFlagAPI is a micro-benchmark (in process, over loopback HTTP, real PostgreSQL) of
// the management API's two commonest calls on a flag with two conditions: reading it and
// changing its rollout, as the admin's personal key.
func BenchmarkFlagAPI(b *testing.B) {
	api := httpapitest.Serve(b)
	call := func(method, path, body string, want int) {
		req, _ := http.NewRequest(method, api.URL+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+api.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	flags := fmt.Sprintf("/api/projects/%d/feature_flags/", api.ProjectID)
	call("POST", flags, `{"key": "bench", "filters": {"groups": [{"properties": [{"key": "email", "value": "@example.com",
		"operator": "icontains", "type": "person"}], "rollout_percentage": 50}, {"properties": [], "rollout_percentage": 10}]}}`, 201)
	flag := flags + "1/"
	b.Run("GET", func(b *testing.B) {
		for range b.N {
			call("GET", flag, "", 200)
		}
	})
	b.Run("PATCH", func(b *testing.B) {
		for i := range b.N {
			call("PATCH", flag, fmt.Sprintf(`{"filters": {"groups": [{"properties": [{"key": "email", "value": "@example.com",
				"operator": "icontains", "type": "person"}], "rollout_percentage": %d}, {"properties": [], "rollout_percentage": 10}]}}`, 20+i%2), 200)
		}
	})
}
