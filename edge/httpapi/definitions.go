package httpapi

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/state"
)

// projectForBearer resolves ?token= and checks the bearer credential may read the project's
// flag definitions; it answers the error itself and returns nil when it may not.
func (s *Server) projectForBearer(ctx *fasthttp.RequestCtx) *state.Project {
	if !s.cfg.State.Ready() {
		decide.WriteError(ctx, fasthttp.StatusServiceUnavailable, "server_error", "fetch_team_fail", "Unable to fetch the project's flags yet.")
		return nil
	}
	key := bearer(ctx)
	if key == "" {
		decide.WriteError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "not_authenticated", "Authentication credentials were not provided.")
		return nil
	}
	token := string(ctx.QueryArgs().Peek("token"))
	if token == "" {
		decide.WriteError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "no_api_key",
			"No project API key provided: pass the project's token as ?token=.")
		return nil
	}
	project := s.cfg.State.ByToken(token)
	if project == nil {
		decide.WriteError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "invalid_api_key",
			"Project API key invalid. You can find your project API key in project settings.")
		return nil
	}
	switch project.DefinitionsAccess(key) {
	case state.AccessUnknown:
		decide.WriteError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "invalid_personal_api_key",
			"Personal API key found in request Authorization header is invalid.")
		return nil
	case state.AccessForbidden:
		decide.WriteError(ctx, fasthttp.StatusForbidden, "authentication_error", "permission_denied",
			"API key missing required scope 'feature_flag:read'")
		return nil
	}
	return project
}

// handleDefinitions serves the flag definitions SDKs evaluate locally, with an ETag so that
// pollers get a 304 while nothing changed.
func (s *Server) handleDefinitions(ctx *fasthttp.RequestCtx) {
	project := s.projectForBearer(ctx)
	if project == nil {
		return
	}
	body, etag, err := project.Definitions(ctx.QueryArgs().Has("send_cohorts"))
	if err != nil {
		s.cfg.Logger.Error("flag definitions", "project", project.ID, "err", err)
		decide.WriteError(ctx, fasthttp.StatusInternalServerError, "server_error", "error", "A server error occurred.")
		return
	}
	ctx.Response.Header.Set("ETag", etag)
	ctx.Response.Header.Set("Cache-Control", "private, must-revalidate")
	if match := ctx.Request.Header.Peek("If-None-Match"); len(match) > 0 && etagMatches(match, etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, body)
}

// etagMatches reports whether an If-None-Match header names etag (weakly: W/ is ignored).
func etagMatches(header []byte, etag string) bool {
	want := bytes.TrimPrefix([]byte(etag), []byte("W/"))
	for _, part := range bytes.Split(header, []byte(",")) {
		part = bytes.TrimPrefix(bytes.TrimSpace(part), []byte("W/"))
		if bytes.Equal(part, want) || bytes.Equal(part, []byte("*")) {
			return true
		}
	}
	return false
}

// handleRemoteConfig answers a flag's "true" payload as a JSON string, for remote config
// flags; it takes the project's secret key (or a personal key that may read flags).
func (s *Server) handleRemoteConfig(ctx *fasthttp.RequestCtx) {
	project := s.projectForBearer(ctx)
	if project == nil {
		return
	}
	if p, _ := ctx.UserValue("project").(string); p != "@current" && p != strconv.FormatInt(project.ID, 10) {
		decide.WriteError(ctx, fasthttp.StatusNotFound, "invalid_request", "not_found", "Not found.")
		return
	}
	key, _ := ctx.UserValue("key").(string)
	if project.Snapshot.Lookup(key) < 0 {
		decide.WriteError(ctx, fasthttp.StatusNotFound, "invalid_request", "not_found", "Not found.")
		return
	}
	payload, ok := project.Payloads[key]
	switch {
	case !ok:
		writeJSON(ctx, fasthttp.StatusOK, []byte("null"))
	case len(payload) > 0 && payload[0] == '"':
		writeJSON(ctx, fasthttp.StatusOK, payload)
	default:
		compact := new(bytes.Buffer)
		if err := json.Compact(compact, payload); err != nil {
			compact.Reset()
			compact.Write(payload)
		}
		quoted, _ := json.Marshal(compact.String())
		writeJSON(ctx, fasthttp.StatusOK, quoted)
	}
}

// remoteConfig is what posthog-js loads before anything else.
func remoteConfig(token string) []byte {
	body, _ := json.Marshal(map[string]any{
		"token": token, "supportedCompression": []string{"gzip-js", "base64"},
		"config": map[string]any{"enable_collect_everything": true}, "editorParams": map[string]any{},
		"isAuthenticated": false, "sessionRecording": false, "capturePerformance": false,
		"autocapture_opt_out": false, "siteApps": []any{}, "surveys": false, "heatmaps": false,
		"defaultIdentifiedOnly": true, "hasFeatureFlags": true,
	})
	return body
}

func (s *Server) arrayProject(ctx *fasthttp.RequestCtx) *state.Project {
	token, _ := ctx.UserValue("token").(string)
	p := s.cfg.State.ByToken(token)
	if p == nil {
		decide.WriteError(ctx, fasthttp.StatusNotFound, "invalid_request", "not_found", "Not found.")
	}
	return p
}

func (s *Server) handleArrayConfig(ctx *fasthttp.RequestCtx) {
	if p := s.arrayProject(ctx); p != nil {
		writeJSON(ctx, fasthttp.StatusOK, remoteConfig(p.Token))
	}
}

func (s *Server) handleArrayConfigJS(ctx *fasthttp.RequestCtx) {
	p := s.arrayProject(ctx)
	if p == nil {
		return
	}
	token, _ := json.Marshal(p.Token)
	var b bytes.Buffer
	b.WriteString("(function() {\n  window._POSTHOG_REMOTE_CONFIG = window._POSTHOG_REMOTE_CONFIG || {};\n  window._POSTHOG_REMOTE_CONFIG[")
	b.Write(token)
	b.WriteString("] = {\n    config: ")
	b.Write(remoteConfig(p.Token))
	b.WriteString(",\n    siteApps: []\n  };\n})();\n")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/javascript")
	ctx.SetBody(b.Bytes())
}
