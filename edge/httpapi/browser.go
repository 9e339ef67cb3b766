package httpapi

import (
	"encoding/json"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/jsbundle"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/flags"
)

// Cache lifetimes of the posthog-js bundles. /static/<name>.js keeps its path across
// posthog-js releases, so browsers keep it an hour and then revalidate with the ETag;
// /static/<version>/<name>.js never changes and is cached for a year.
const (
	staticCacheControl    = "public, max-age=3600"
	versionedCacheControl = "public, max-age=31536000, immutable"
)

// handleStatic serves the embedded posthog-js bundles: /static/<name>.js, which the snippet
// and the SDK load, and /static/<version>/<name>.js for the pinned version only.
func (s *Server) handleStatic(ctx *fasthttp.RequestCtx) error {
	cacheControl := staticCacheControl
	if v, ok := ctx.UserValue("version").(string); ok {
		if v != jsbundle.Version {
			return apierror.NotFound
		}
		cacheControl = versionedCacheControl
	}
	name, _ := ctx.UserValue("file").(string)
	a := jsbundle.Lookup(name)
	if a == nil {
		return apierror.NotFound
	}
	h := &ctx.Response.Header
	h.Set("Cache-Control", cacheControl)
	h.Set("ETag", a.ETag)
	h.Add("Vary", "Accept-Encoding")
	h.SetContentType("application/javascript; charset=utf-8")
	if match := ctx.Request.Header.Peek("If-None-Match"); len(match) > 0 && flags.ETagMatches(string(match), a.ETag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	if ctx.Request.Header.HasAcceptEncoding("gzip") {
		h.Set("Content-Encoding", "gzip")
		ctx.SetBody(a.Gzip())
		return nil
	}
	ctx.SetBody(a.Body)
	return nil
}

// tokenProject resolves the ?token= of a public browser endpoint.
func (s *Server) tokenProject(ctx *fasthttp.RequestCtx) (*state.Project, error) {
	token := string(ctx.QueryArgs().Peek("token"))
	if token == "" {
		token = string(ctx.QueryArgs().Peek("api_key"))
	}
	if token == "" {
		return nil, apierror.NoAPIKey
	}
	if !s.cfg.State.Ready() {
		return nil, apierror.NotReady
	}
	p := s.cfg.State.ByToken(token)
	if p == nil {
		return nil, apierror.InvalidAPIKey
	}
	return p, nil
}

// earlyAccessFeatureJSON is a feature as posthog-js reads it (its FeaturePreview type).
type earlyAccessFeatureJSON struct {
	ID               string  `json:"id"`
	Name             string  `json:"name"`
	Description      string  `json:"description"`
	Stage            string  `json:"stage"`
	DocumentationURL string  `json:"documentationUrl"`
	FlagKey          *string `json:"flagKey"`
}

// handleEarlyAccessFeatures answers posthog-js's getEarlyAccessFeatures from the snapshot:
// the project's features in the stages ?stage= names (repeatable), beta when none is named.
func (s *Server) handleEarlyAccessFeatures(ctx *fasthttp.RequestCtx) error {
	p, err := s.tokenProject(ctx)
	if err != nil {
		return err
	}
	var stages []string
	for _, v := range ctx.QueryArgs().PeekMulti("stage") {
		stages = append(stages, string(v))
	}
	if len(stages) == 0 {
		stages = []string{"beta"}
	}
	out := struct {
		Features []earlyAccessFeatureJSON `json:"earlyAccessFeatures"`
	}{Features: []earlyAccessFeatureJSON{}}
	for _, f := range p.EarlyAccessFeatures {
		if !slices.Contains(stages, f.Stage) {
			continue
		}
		j := earlyAccessFeatureJSON{ID: f.ID, Name: f.Name, Description: f.Description, Stage: f.Stage, DocumentationURL: f.DocumentationURL}
		if f.FlagKey != "" {
			j.FlagKey = &f.FlagKey
		}
		out.Features = append(out.Features, j)
	}
	body, err := json.Marshal(out)
	if err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, body)
	return nil
}

// handleSurveys answers posthog-js's survey request: surveys are not supported, so every
// project has none.
func (s *Server) handleSurveys(ctx *fasthttp.RequestCtx) error {
	if _, err := s.tokenProject(ctx); err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, []byte(`{"surveys":[]}`))
	return nil
}
