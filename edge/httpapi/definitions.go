package httpapi

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/flags"
)

// projectForBearer resolves ?token= and checks the bearer credential may read the project's
// flag definitions.
func (s *Server) projectForBearer(ctx *fasthttp.RequestCtx) (*state.Project, error) {
	if !s.cfg.State.Ready() {
		return nil, apierror.NotReady
	}
	key := bearer(ctx)
	if key == "" {
		return nil, apierror.NotAuthenticated
	}
	token := string(ctx.QueryArgs().Peek("token"))
	if token == "" {
		return nil, apierror.NoAPIKey
	}
	project := s.cfg.State.ByToken(token)
	if project == nil {
		return nil, apierror.InvalidAPIKey
	}
	switch project.DefinitionsAccess(key) {
	case state.AccessUnknown:
		return nil, apierror.InvalidPersonalAPIKey
	case state.AccessForbidden:
		return nil, apierror.MissingReadScope
	}
	return project, nil
}

// handleDefinitions serves the flag definitions SDKs evaluate locally, with an ETag so that
// pollers get a 304 while nothing changed.
func (s *Server) handleDefinitions(ctx *fasthttp.RequestCtx) error {
	project, err := s.projectForBearer(ctx)
	if err != nil {
		return err
	}
	body, etag, err := project.Definitions(ctx.QueryArgs().Has("send_cohorts"))
	if err != nil {
		return err
	}
	ctx.Response.Header.Set("ETag", etag)
	ctx.Response.Header.Set("Cache-Control", "private, must-revalidate")
	ctx.Response.Header.SetCanonical(state.VersionHeader, project.VersionText)
	if match := ctx.Request.Header.Peek("If-None-Match"); len(match) > 0 && flags.ETagMatches(string(match), etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	writeJSON(ctx, fasthttp.StatusOK, body)
	return nil
}

// handleRemoteConfig answers a flag's "true" payload as a JSON string, for remote config
// flags; it takes the project's secret key (or a personal key that may read flags).
func (s *Server) handleRemoteConfig(ctx *fasthttp.RequestCtx) error {
	project, err := s.projectForBearer(ctx)
	if err != nil {
		return err
	}
	if p, _ := ctx.UserValue("project").(string); p != "@current" && p != strconv.FormatInt(project.ID, 10) {
		return apierror.NotFound
	}
	key, _ := ctx.UserValue("key").(string)
	if project.Snapshot.Lookup(key) < 0 {
		return apierror.NotFound
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
	return nil
}

func (s *Server) arrayProject(ctx *fasthttp.RequestCtx) (*state.Project, error) {
	token, _ := ctx.UserValue("token").(string)
	if p := s.cfg.State.ByToken(token); p != nil {
		return p, nil
	}
	return nil, apierror.NotFound
}

// handleArrayConfig serves the remote config posthog-js loads before anything else.
func (s *Server) handleArrayConfig(ctx *fasthttp.RequestCtx) error {
	p, err := s.arrayProject(ctx)
	if err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, p.RemoteConfig)
	return nil
}

// handleArrayConfigJS serves the remote config as a script that records it for posthog-js.
func (s *Server) handleArrayConfigJS(ctx *fasthttp.RequestCtx) error {
	p, err := s.arrayProject(ctx)
	if err != nil {
		return err
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/javascript")
	ctx.SetBody(p.RemoteConfigJS)
	return nil
}
