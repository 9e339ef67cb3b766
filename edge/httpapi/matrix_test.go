package httpapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/edge/jsbundle"
)

// credential is who calls: a project token in the request and a bearer key.
type credential struct {
	name   string
	token  string // project token sent in the body or as ?token=
	bearer string // Authorization: Bearer
}

// The credentials of the matrix: project 7's (token, read key, write-only key, secret) and
// project 8's, which must never reach project 7.
var credentials = []credential{
	{"nothing", "", ""},
	{"unknown token", "phc_unknown", ""},
	{"own token", token, ""},
	{"own token, own read key", token, readKey},
	{"own token, own secret", token, secretKey},
	{"own token, key without read scope", token, writeOnly},
	{"own token, other project's key", token, otherReader},
	{"own token, other project's secret", token, otherSecret},
	{"other token, own read key", otherToken, readKey},
	{"personal key, own project", readKey + "|7", ""},
	{"personal key, other project", otherReader + "|7", ""},
}

// routeAuth says what each route of the edge answers each credential. Every route the router
// has must be here: a new route without an entry fails TestRouteAuthorisationMatrix.
var routeAuth = map[string]map[string]int{
	"/decide":                            tokenRoute(),
	"/flags":                             tokenRoute(),
	"/capture":                           captureRoute(),
	"/batch":                             captureRoute(),
	"/e":                                 captureRoute(),
	"/i/v0/e":                            captureRoute(),
	"/track":                             captureRoute(),
	"/engage":                            captureRoute(),
	"/flags/definitions":                 bearerRoute(),
	"/api/feature_flag/local_evaluation": bearerRoute(),
	"/api/projects/{project}/feature_flags/{key}/remote_config": bearerRoute(),
	"/array/{token}/config":    arrayRoute(),
	"/array/{token}/config.js": arrayRoute(),
	"/static/{file}":           open(200),
	"/static/{version}/{file}": open(200),
	// posthog-js's browser endpoints take the token as ?token=, like /decide.
	"/api/early_access_features": tokenRoute(),
	"/api/surveys":               tokenRoute(),
	"/_health":                   open(200),
	"/_ready":                    open(200),
	"/metrics":                   open(200),
}

// tokenRoute: /decide and /flags take a project token; bearer keys play no part.
func tokenRoute() map[string]int {
	return map[string]int{"nothing": 401, "unknown token": 401, "own token": 200, "own token, own read key": 200,
		"own token, own secret": 200, "own token, key without read scope": 200, "own token, other project's key": 200,
		"own token, other project's secret": 200, "other token, own read key": 200,
		// A personal key is no project token at /decide.
		"personal key, own project": 401, "personal key, other project": 401}
}

// captureRoute: capture also takes a personal key with project_id; the key must be the
// named project's.
func captureRoute() map[string]int {
	m := tokenRoute()
	m["personal key, own project"], m["personal key, other project"] = 200, 401
	return m
}

// bearerRoute: flag definitions need the project's token and a key of that project that may
// read flags (or its secret).
func bearerRoute() map[string]int {
	return map[string]int{"nothing": 401, "unknown token": 401, "own token": 401, "own token, own read key": 200,
		"own token, own secret": 200, "own token, key without read scope": 403, "own token, other project's key": 401,
		"own token, other project's secret": 401, "other token, own read key": 401,
		"personal key, own project": 401, "personal key, other project": 401}
}

// arrayRoute: posthog-js's remote config, addressed by token in the path.
func arrayRoute() map[string]int {
	return map[string]int{"nothing": 404, "unknown token": 404, "own token": 200, "own token, own read key": 200,
		"own token, own secret": 200, "own token, key without read scope": 200, "own token, other project's key": 200,
		"own token, other project's secret": 200, "other token, own read key": 200,
		"personal key, own project": 404, "personal key, other project": 404}
}

func open(status int) map[string]int {
	m := map[string]int{}
	for _, c := range credentials {
		m[c.name] = status
	}
	return m
}

// request builds a request of route for credential c.
func request(route string, c credential) (method, uri string, body []byte, headers []string) {
	tok, projectID, personal := c.token, "", false
	if k, p, ok := strings.Cut(c.token, "|"); ok {
		tok, projectID, personal = k, p, true
	}
	if c.bearer != "" {
		headers = append(headers, "Authorization: Bearer "+c.bearer)
	}
	switch {
	case strings.HasPrefix(route, "/array/"):
		if tok == "" {
			tok = "none"
		}
		return "GET", strings.Replace(route, "{token}", tok, 1), nil, headers
	case routeAuth[route]["own token, key without read scope"] == 403: // a bearer route
		path := strings.NewReplacer("{project}", "7", "{key}", "everyone").Replace(route)
		q := ""
		if tok != "" && !personal {
			q = "?token=" + tok
		}
		return "GET", path + q, nil, headers
	case strings.HasPrefix(route, "/static/"):
		return "GET", strings.NewReplacer("{version}", jsbundle.Version, "{file}", "array.js").Replace(route), nil, headers
	case route == "/api/early_access_features" || route == "/api/surveys":
		q := ""
		if tok != "" {
			q = "?token=" + tok
		}
		return "GET", route + "/" + q, nil, headers
	case strings.HasPrefix(route, "/_") || route == "/metrics":
		return "GET", route, nil, headers
	}
	ev := map[string]any{"event": "e", "distinct_id": "d"}
	if tok != "" {
		ev["api_key"] = tok
	}
	if projectID != "" {
		ev["project_id"] = projectID
	}
	body, _ = json.Marshal(ev)
	return "POST", route + "/", body, headers
}

// TestRouteAuthorisationMatrix calls every route of the edge's router with every credential.
func TestRouteAuthorisationMatrix(t *testing.T) {
	e := newEnv(t, true)
	var routes []string
	for _, paths := range e.api.Routes() {
		for _, p := range paths {
			if !slices.Contains(routes, p) {
				routes = append(routes, p)
			}
		}
	}
	for _, route := range routes {
		want, ok := routeAuth[route]
		if !ok {
			t.Errorf("route %s has no entry in the authorisation matrix", route)
			continue
		}
		for _, c := range credentials {
			method, uri, body, headers := request(route, c)
			got := e.call(method, uri, body, headers...)
			if got.status != want[c.name] {
				t.Errorf("%s %s as %q: %d %s, want %d", method, uri, c.name, got.status, got.body, want[c.name])
			}
		}
	}
	for route := range routeAuth {
		if !slices.ContainsFunc(routes, func(r string) bool { return r == route }) {
			t.Errorf("the matrix names %s, which the router does not have", route)
		}
	}
}
