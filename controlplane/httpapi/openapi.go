package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 description of the management API, served at /api/schema/. A test
// validates real answers of every route against it, so it cannot drift from the code.
//
//go:embed openapi.yaml
var OpenAPI []byte

// handleSchema serves the description as YAML, as PostHog serves its own at this path.
func handleSchema(*http.Request) (answer, error) {
	return encoded("application/vnd.oai.openapi; charset=utf-8", OpenAPI).with("Cache-Control", "public, max-age=300"), nil
}
