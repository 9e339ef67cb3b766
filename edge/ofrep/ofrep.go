// Package ofrep serves the OpenFeature Remote Evaluation Protocol (OFREP 0.3.0) at the edge,
// so that any OpenFeature SDK can use flagedge through the community OFREP providers: single
// and bulk evaluation by the same path as /flags (one engine, the same answers), the provider
// configuration, and the server-sent-events stream (ADR 0008) that tells browsers when their
// project's flags change.
package ofrep

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/edge/jsonenc"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
)

// MaxBodyBytes bounds an evaluation request: it carries one context, like a /flags body.
const MaxBodyBytes = decide.MaxBodyBytes

// MinPollInterval is the shortest polling interval the configuration announces to providers
// that poll the bulk endpoint: a bulk evaluation costs tens of microseconds, and a second
// between polls keeps a page's cost negligible while changes still show within seconds.
const MinPollInterval = 1000 // milliseconds

// exposeHeaders are the response headers a page on another origin may read: providers read
// the bulk answer's ETag and a 429's Retry-After.
const exposeHeaders = "ETag, Retry-After, X-Flagedge-Snapshot-Version"

// Config holds what OFREP answers from.
type Config struct {
	State  *state.Holder
	Decide *decide.Handler
	// Streams announces and serves the change streams; nil when streaming is off.
	Streams *Hub
	Logger  *slog.Logger
}

// Handler serves the OFREP routes.
type Handler struct {
	cfg   Config
	infos infoCache
}

// New returns the OFREP handler.
func New(cfg Config) *Handler { return &Handler{cfg: cfg} }

// Streams returns the change-stream hub, or nil when streaming is off.
func (h *Handler) Streams() *Hub { return h.cfg.Streams }

// Error is an OFREP error answer: its status, its errorCode and a user-safe errorDetails.
type Error struct {
	Status  int
	Code    string
	Details string
	// RetryAfter is the Retry-After header of a 429, in seconds; 0 when none.
	RetryAfter int
}

func (e *Error) Error() string { return e.Code + ": " + e.Details }

// parseError is the answer to a body that is not JSON; cause says why.
func parseError(cause string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: codeParse, Details: "The body is not an evaluation request: " + cause}
}

// The OFREP error codes.
const (
	codeParse         = "PARSE_ERROR"
	codeTargetingKey  = "TARGETING_KEY_MISSING"
	codeInvalidCtx    = "INVALID_CONTEXT"
	codeFlagNotFound  = "FLAG_NOT_FOUND"
	codeGeneral       = "GENERAL"
	detailLookupError = "Stored properties this flag needs could not be fetched; retry."
)

var (
	errNoToken = &Error{Status: http.StatusUnauthorized, Code: codeGeneral,
		Details: "No project API key: send it as Authorization: Bearer phc_… or X-API-Key."}
	errBadToken = &Error{Status: http.StatusUnauthorized, Code: codeGeneral, Details: "Project API key invalid."}
	errNotReady = &Error{Status: http.StatusServiceUnavailable, Code: codeGeneral, Details: "The edge holds no flags yet; retry shortly."}
	errTooLarge = &Error{Status: http.StatusRequestEntityTooLarge, Code: codeParse, Details: "The request body is over 1 MB."}
)

// WriteError answers err in OFREP's error shape, with the flag's key when the route has one:
// an *Error as it says; an *apierror.Error (from the edge's shared checks, such as rate limits
// and body limits) with its status and detail; anything else as a 500 whose cause goes to the
// log, never to the caller. A 429 carries Retry-After.
func WriteError(ctx *fasthttp.RequestCtx, log *slog.Logger, err error) {
	var e *Error
	if !errors.As(err, &e) {
		var ae *apierror.Error
		switch {
		case errors.As(err, &ae):
			e = &Error{Status: ae.Status, Code: codeGeneral, Details: ae.Detail}
			if ae.RetryAfter > 0 {
				e.RetryAfter = ae.RetryAfterSeconds()
			}
		default:
			log.Error("internal error", "path", string(ctx.Path()), "err", err)
			e = &Error{Status: http.StatusInternalServerError, Code: codeGeneral, Details: "A server error occurred."}
		}
	}
	if (e.Status == http.StatusTooManyRequests || e.RetryAfter > 0) && len(ctx.Response.Header.Peek("Retry-After")) == 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(e.RetryAfter, 1)))
	}
	b := make([]byte, 0, 96+len(e.Details))
	b = append(b, '{')
	if key, ok := ctx.UserValue("key").(string); ok {
		b = append(b, `"key":`...)
		b = jsonenc.AppendString(b, key)
		b = append(b, ',')
	}
	b = append(b, `"errorCode":`...)
	b = jsonenc.AppendString(b, e.Code)
	b = append(b, `,"errorDetails":`...)
	b = jsonenc.AppendString(b, e.Details)
	b = append(b, '}')
	ctx.Response.ResetBody()
	ctx.Response.Header.Set("Access-Control-Expose-Headers", exposeHeaders)
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// project finds the project of the request's token: Authorization: Bearer, else X-API-Key.
func (h *Handler) project(ctx *fasthttp.RequestCtx) (*state.Project, error) {
	token := bearer(ctx)
	if token == "" {
		token = string(bytes.TrimSpace(ctx.Request.Header.Peek("X-API-Key")))
	}
	if token == "" {
		return nil, errNoToken
	}
	if !h.cfg.State.Ready() {
		return nil, errNotReady
	}
	p := h.cfg.State.ByToken(token)
	if p == nil {
		return nil, errBadToken
	}
	return p, nil
}

// bearer returns the credential of an "Authorization: Bearer …" header.
func bearer(ctx *fasthttp.RequestCtx) string {
	v := bytes.TrimSpace(ctx.Request.Header.Peek("Authorization"))
	if len(v) > 7 && bytes.EqualFold(v[:7], []byte("bearer ")) {
		return string(bytes.TrimSpace(v[7:]))
	}
	return ""
}

// runtime is the runtime an OFREP request comes from, for the flags it gets
// (flags.Snapshot.Selected): told from its headers as /flags tells it (a browser's OFREP
// provider is a client), and a server when they tell nothing, since OFREP's server providers
// do not name themselves as PostHog's SDKs do. OFREP has no evaluation contexts.
func runtime(ctx *fasthttp.RequestCtx) flags.Runtime {
	if rt := decide.RequestRuntime(&ctx.Request.Header, flags.RuntimeUnknown); rt != flags.RuntimeUnknown {
		return rt
	}
	return flags.RuntimeServer
}

// evaluate authenticates the request, reads its context within /flags's bounds, holding what
// it costs in lease, and evaluates every flag of the project by /flags's path.
func (h *Handler) evaluate(ctx *fasthttp.RequestCtx, lease *reqbody.Lease) (*state.Project, []flags.Result, error) {
	p, err := h.project(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The edge streams request bodies: Read refuses one over the limit before reading it.
	body, err := reqbody.Read(ctx, MaxBodyBytes, lease)
	if err != nil {
		return nil, nil, bodyError(err)
	}
	c, err := readContext(body, lease)
	if err != nil {
		return nil, nil, err
	}
	results := h.cfg.Decide.Evaluate(ctx, p, c, nil)
	ctx.Response.Header.SetCanonical(state.VersionHeader, p.VersionText)
	return p, results, nil
}

// lease starts a request's lease of the in-flight budget /decide reserves from
// (--max-inflight-bytes): an evaluation holds its body and what parsing it costs there, as
// a /flags request does.
func (h *Handler) lease() reqbody.Lease { return h.cfg.Decide.Budget().Lease() }

// readContext admits an evaluation request's body as /flags admits its body — the same
// limits of what it holds, its parsing's cost reserved in lease (decide.AdmitBody) — then
// parses it.
func readContext(body []byte, lease *reqbody.Lease) (*decide.Context, error) {
	if err := decide.AdmitBody(body, lease); err != nil {
		return nil, bodyError(err)
	}
	return parseRequest(body)
}

// bodyError is the answer to a body that could not be read or admitted: one over the size
// limit or over a limit of what it holds is 413 PARSE_ERROR, naming the limit as /flags's
// 413 does; one the limits' scan finds is not JSON, 400 PARSE_ERROR as the parser's; a spent
// in-flight budget is /flags's 503 with Retry-After (in OFREP's shape).
func bodyError(err error) error {
	var limit *event.LimitError
	var invalid *event.InvalidPayloadError
	switch {
	case errors.As(err, &limit):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: codeParse, Details: "The request is over a limit: " + limit.Error() + "."}
	case errors.As(err, &invalid):
		return parseError(invalid.Reason)
	}
	return reqbody.AsAPIError(err, errTooLarge)
}

// ServeFlag answers POST /ofrep/v1/evaluate/flags/{key}: one flag for one context.
func (h *Handler) ServeFlag(ctx *fasthttp.RequestCtx) error {
	key, _ := ctx.UserValue("key").(string)
	lease := h.lease()
	defer lease.Release()
	p, results, err := h.evaluate(ctx, &lease)
	if err != nil {
		return err
	}
	i := p.Snapshot.Lookup(key)
	if i < 0 || !p.Snapshot.Selected(i, runtime(ctx), nil) {
		return &Error{Status: http.StatusNotFound, Code: codeFlagNotFound, Details: "Flag '" + key + "' was not found."}
	}
	r := &results[i]
	if r.Failed {
		return &Error{Status: http.StatusInternalServerError, Code: codeGeneral, Details: detailLookupError}
	}
	if r.Active {
		p.Counts.Flag(i).Add(r.Enabled, r.Variant)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendEvaluation(make([]byte, 0, 256), r, h.infos.of(p).flag(i)))
	return nil
}

// ServeBulk answers POST /ofrep/v1/evaluate/flags: every flag for one context, with an ETag
// (the hash of the answer, so it changes exactly when the answer does) and 304 for a matching
// If-None-Match. With streaming on, the answer lists the change stream of ADR 0008.
// ?flagConfigEtag= and ?flagConfigLastModified= need no handling: an edge always answers
// from the snapshot it holds, which is at least as new as any change it announced.
func (h *Handler) ServeBulk(ctx *fasthttp.RequestCtx) error {
	lease := h.lease()
	defer lease.Release()
	p, results, err := h.evaluate(ctx, &lease)
	if err != nil {
		return err
	}
	var want []bool // nil: every flag
	if rt := runtime(ctx); p.Snapshot.Filters(rt, nil) {
		want = make([]bool, len(results))
		for i := range want {
			want[i] = p.Snapshot.Selected(i, rt, nil)
		}
	}
	decide.Count(p, results, want)
	info := h.infos.of(p)
	b := make([]byte, 0, 128+160*len(results))
	b = append(b, `{"flags":[`...)
	first := true
	for i := range results {
		if want != nil && !want[i] {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		r := &results[i]
		if r.Failed {
			b = append(b, `{"key":`...)
			b = jsonenc.AppendString(b, r.Key)
			b = append(b, `,"errorCode":"GENERAL","errorDetails":`...)
			b = jsonenc.AppendString(b, detailLookupError)
			b = append(b, '}')
			continue
		}
		b = appendEvaluation(b, r, info.flag(i))
	}
	b = append(b, ']')
	if url := h.streamURL(ctx, p); url != "" {
		b = append(b, `,"eventStreams":[{"type":"sse","url":`...)
		b = jsonenc.AppendString(b, url)
		b = append(b, `,"inactivityDelaySec":`...)
		b = jsonenc.AppendInt(b, InactivityDelaySec)
		b = append(b, `}]`...)
	}
	b = append(b, '}')
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:12]) + `"`
	ctx.Response.Header.Set("ETag", etag)
	ctx.Response.Header.Set("Access-Control-Expose-Headers", exposeHeaders)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	if match := ctx.Request.Header.Peek("If-None-Match"); len(match) > 0 && flags.ETagMatches(string(match), etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return nil
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return nil
}

// streamURL is the change stream to announce to a bulk evaluation, or "" when streaming is
// off (or the request's Host cannot make a URL).
func (h *Handler) streamURL(ctx *fasthttp.RequestCtx, p *state.Project) string {
	if h.cfg.Streams == nil {
		return ""
	}
	return h.cfg.Streams.URL(ctx, p)
}

// ServeConfiguration answers GET /ofrep/v1/configuration, the provider-configuration
// extension: who we are, the value types flags have, polling's minimum interval and whether
// change streams are on.
func (h *Handler) ServeConfiguration(ctx *fasthttp.RequestCtx) error {
	b := make([]byte, 0, 320)
	b = append(b, `{"name":"flagedge","capabilities":{"cacheInvalidation":{"polling":{"enabled":true,"minPollingIntervalMs":`...)
	b = jsonenc.AppendInt(b, MinPollInterval)
	b = append(b, `},"sse":{"enabled":`...)
	b = jsonenc.AppendBool(b, h.cfg.Streams != nil)
	b = append(b, `}},"flagEvaluation":{"supportedTypes":["boolean","string","object"]}}}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return nil
}
