// Package decide serves /decide and /flags at the edge: it decodes the request, gathers the
// properties flags need (request overrides, GeoIP, stored properties from a cache), evaluates
// the project's compiled snapshot and writes the answer in the shape the SDK asked for.
package decide

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/flagedge/flagedge/edge/clientip"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
)

// MaxBodyBytes bounds a decoded /decide body; requests carry one user's properties.
const MaxBodyBytes = 1 << 20

// maxDistinctIDLength is where distinct ids are cut, as PostHog does.
const maxDistinctIDLength = 200

// Handler serves /decide and /flags.
type Handler struct {
	state   *state.Holder
	store   *Store
	geo     *geocache.Locator
	log     *slog.Logger
	pool    sync.Pool // *scratch
	lookups *prometheus.CounterVec
}

// scratch is per-request memory, reused across requests.
type scratch struct {
	parser     fastjson.Parser
	in         input
	person     flags.Properties
	groupProps map[string]flags.Properties
	results    []flags.Result
	out        []byte
}

// NewHandler returns the decide handler. store and locator may be nil (no stored
// properties, no GeoIP).
func NewHandler(h *state.Holder, store *Store, locator *geocache.Locator, log *slog.Logger, reg prometheus.Registerer) *Handler {
	d := &Handler{state: h, store: store, geo: locator, log: log,
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_property_lookups_total",
			Help: "Stored-property look-ups made for /decide, by kind and result."}, []string{"kind", "result"})}
	d.pool.New = func() any {
		return &scratch{out: make([]byte, 0, 4096), person: flags.Properties{}, groupProps: map[string]flags.Properties{}}
	}
	if reg != nil {
		reg.MustRegister(d.lookups)
	}
	return d
}

// Endpoint says which path a request came in on.
type Endpoint int

// The endpoints.
const (
	Decide Endpoint = iota
	Flags
)

// Serve answers a /decide or /flags request.
func (d *Handler) Serve(ctx *fasthttp.RequestCtx, ep Endpoint) {
	raw := ctx.PostBody()
	if ctx.IsGet() {
		raw = ctx.QueryArgs().Peek("data")
	}
	s := d.pool.Get().(*scratch)
	defer d.pool.Put(s)
	if len(bytes.TrimSpace(raw)) > 0 {
		decoded, err := event.Decode(event.Request{
			Body:            raw,
			Compression:     bytesString(ctx.QueryArgs().Peek("compression")),
			ContentType:     bytesString(ctx.Request.Header.ContentType()),
			ContentEncoding: bytesString(ctx.Request.Header.ContentEncoding()),
		}, MaxBodyBytes)
		if errors.Is(err, event.ErrTooLarge) {
			WriteError(ctx, fasthttp.StatusRequestEntityTooLarge, "invalid_request", "request_too_large", "The request body is too large.")
			return
		}
		if err == nil {
			err = s.parse(decoded)
		}
		if err != nil {
			WriteError(ctx, fasthttp.StatusBadRequest, "validation_error", "invalid_payload", "Malformed request data: "+err.Error())
			return
		}
	} else if err := s.parse(nil); err != nil {
		WriteError(ctx, fasthttp.StatusBadRequest, "validation_error", "invalid_payload", "Malformed request data: "+err.Error())
		return
	}
	in := &s.in
	token := in.token
	if token == "" {
		token = bytesString(ctx.QueryArgs().Peek("token"))
	}
	if token == "" {
		WriteError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "no_api_key",
			"No project API key provided. You can find your project API key in PostHog project settings.")
		return
	}
	if !d.state.Ready() {
		WriteError(ctx, fasthttp.StatusServiceUnavailable, "server_error", "fetch_team_fail", "Unable to fetch the project's flags yet.")
		return
	}
	project := d.state.ByToken(token)
	if project == nil {
		WriteError(ctx, fasthttp.StatusUnauthorized, "authentication_error", "invalid_api_key",
			"Project API key invalid. You can find your project API key in project settings.")
		return
	}
	if in.distinctID == "" {
		WriteError(ctx, fasthttp.StatusBadRequest, "validation_error", "missing_distinct_id", "Decide requires a distinct_id.")
		return
	}

	var errored bool
	if !in.disableFlags {
		req := flags.Request{DistinctID: in.distinctID, PersonProperties: in.personProperties, GroupProperties: in.groupProperties}
		if !in.geoipDisable {
			req.GeoIP = d.geo.Lookup(clientip.FromRequest(ctx.Request.Header.Peek("X-Forwarded-For"), ctx.RemoteIP()))
		}
		errored = d.gather(ctx, project, &req, in)
		s.results = project.Snapshot.Evaluate(&req, s.results)
		for i := range s.results {
			if s.results[i].Failed {
				errored = true
			}
		}
	} else {
		s.results = s.results[:0]
	}
	only := in.flagKeysToEvaluate
	s.out = s.out[:0]
	args := ctx.QueryArgs()
	version, _ := strconv.Atoi(string(args.Peek("v")))
	switch {
	case ep == Flags && (version >= 2 || (version == 0 && !args.Has("config"))):
		s.out = appendFlagsV2(s.out, s.results, only, errored, args.GetBool("config"))
	case ep == Flags:
		s.out = appendDecide(s.out, s.results, only, errored, 3)
	case version >= 4:
		s.out = appendFlagsV2(s.out, s.results, only, errored, true)
	default:
		s.out = appendDecide(s.out, s.results, only, errored, version)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(s.out)
}

// gather fills the request's stored layers (person, groups, continuity overrides) when the
// project's flags need them. It reports whether a look-up failed.
func (d *Handler) gather(ctx context.Context, project *state.Project, req *flags.Request, in *input) (errored bool) {
	snap := project.Snapshot
	if len(in.groups) > 0 {
		req.Groups = in.groups
	}
	if d.store == nil {
		return false
	}
	continuity := len(project.ContinuityFlags) > 0
	if continuity || snap.NeedsPersonLookup(req.PersonProperties, req.GeoIP) {
		person, err := d.store.Person(ctx, project.ID, project.Version, snap.UsesStaticCohorts(), req.DistinctID)
		if err != nil {
			d.lookups.WithLabelValues("person", "error").Inc()
			d.log.Warn("person look-up failed", "project", project.ID, "err", err)
			req.PersonLookupFailed, errored = true, true
		} else {
			d.lookups.WithLabelValues("person", "ok").Inc()
			req.StoredPerson, req.StaticCohorts, req.HashKeyOverrides = person.Properties, person.StaticCohorts, person.HashKeyOverrides
		}
		if anon := in.anonDistinctID; continuity && anon != "" && anon != req.DistinctID && !covers(req.HashKeyOverrides, project.ContinuityFlags) {
			overrides, err := d.store.SetHashKeyOverrides(ctx, project.ID, req.DistinctID, anon, project.ContinuityFlags)
			if err != nil {
				d.log.Warn("hash key override failed", "project", project.ID, "err", err)
				errored = true
				// Hash the anonymous id anyway: it is what the write would have recorded.
				overrides = make(map[string]string, len(project.ContinuityFlags))
				for _, k := range project.ContinuityFlags {
					overrides[k] = anon
				}
			}
			req.HashKeyOverrides = overrides
		}
	}
	var refs []GroupRef
	for i := range 5 {
		name := snap.GroupTypeName(i)
		if key, ok := req.Groups[name]; ok && name != "" && snap.NeedsGroupLookup(i, req.GroupProperties[name]) {
			refs = append(refs, GroupRef{TypeIndex: i, Name: name, Key: key})
		}
	}
	if len(refs) > 0 {
		groups, err := d.store.Groups(ctx, project.ID, refs)
		if err != nil {
			d.lookups.WithLabelValues("groups", "error").Inc()
			d.log.Warn("group look-up failed", "project", project.ID, "err", err)
			for _, r := range refs {
				req.GroupLookupFailed |= 1 << r.TypeIndex
			}
			return true
		}
		d.lookups.WithLabelValues("groups", "ok").Inc()
		req.StoredGroups = groups
	}
	return errored
}

func covers(overrides map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := overrides[k]; !ok {
			return false
		}
	}
	return true
}

// commonConfig is the client configuration part of every /decide answer (API.md 8.2).
const commonConfig = `"config":{"enable_collect_everything":true},"editorParams":{},"isAuthenticated":false,` +
	`"supportedCompression":["gzip","gzip-js","lz64"],"sessionRecording":false,"capturePerformance":false,` +
	`"autocapture_opt_out":false,"siteApps":[],"surveys":false,"heatmaps":false,"defaultIdentifiedOnly":true`

func wanted(key string, only []string) bool {
	if len(only) == 0 {
		return true
	}
	for _, k := range only {
		if k == key {
			return true
		}
	}
	return false
}

// appendDecide writes the /decide answer of versions 1 to 3.
func appendDecide(b []byte, results []flags.Result, only []string, errored bool, version int) []byte {
	b = append(b, '{')
	b = append(b, commonConfig...)
	b = append(b, `,"errorComputingFlags":`...)
	b = appendBool(b, errored)
	b = append(b, `,"errorsWhileComputingFlags":`...)
	b = appendBool(b, errored)
	b = append(b, `,"featureFlags":`...)
	switch {
	case version <= 1:
		b = append(b, '[')
		n := 0
		for i := range results {
			r := &results[i]
			if r.Enabled && wanted(r.Key, only) {
				if n > 0 {
					b = append(b, ',')
				}
				b = appendString(b, r.Key)
				n++
			}
		}
		b = append(b, ']')
	default:
		b = append(b, '{')
		n := 0
		for i := range results {
			r := &results[i]
			if !r.Active || r.Failed || !wanted(r.Key, only) || (version == 2 && !r.Enabled) {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			b = appendString(b, r.Key)
			b = append(b, ':')
			b = appendValue(b, r)
			n++
		}
		b = append(b, '}')
	}
	if version >= 3 {
		b = append(b, `,"featureFlagPayloads":{`...)
		n := 0
		for i := range results {
			r := &results[i]
			if !r.Enabled || r.Payload == nil || !wanted(r.Key, only) {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			b = appendString(b, r.Key)
			b = append(b, ':')
			b = append(b, r.Payload...)
			n++
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendValue(b []byte, r *flags.Result) []byte {
	switch {
	case !r.Enabled:
		return append(b, "false"...)
	case r.Variant != "":
		return appendString(b, r.Variant)
	}
	return append(b, "true"...)
}

// appendFlagsV2 writes the flags v2 answer, with the client configuration when config is set.
func appendFlagsV2(b []byte, results []flags.Result, only []string, errored, config bool) []byte {
	b = append(b, '{')
	if config {
		b = append(b, commonConfig...)
		b = append(b, ',')
	}
	b = append(b, `"flags":{`...)
	n := 0
	for i := range results {
		r := &results[i]
		if !r.Active || !wanted(r.Key, only) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendString(b, r.Key)
		b = append(b, `:{"key":`...)
		b = appendString(b, r.Key)
		b = append(b, `,"enabled":`...)
		b = appendBool(b, r.Enabled)
		b = append(b, `,"variant":`...)
		if r.Variant != "" {
			b = appendString(b, r.Variant)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"reason":{"code":`...)
		b = appendString(b, r.Reason.String())
		b = append(b, `,"condition_index":`...)
		if r.ConditionIndex >= 0 {
			b = appendInt(b, int64(r.ConditionIndex))
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"description":`...)
		b = appendString(b, r.Reason.Description(r.ConditionIndex))
		b = append(b, `},"metadata":{"id":`...)
		b = appendInt(b, r.ID)
		b = append(b, `,"version":`...)
		b = appendInt(b, int64(r.Version))
		b = append(b, `,"description":null,"payload":`...)
		switch {
		case r.Payload == nil || !r.Enabled:
			b = append(b, "null"...)
		case r.Payload[0] == '"':
			b = append(b, r.Payload...)
		default:
			b = appendString(b, string(r.Payload))
		}
		b = append(b, '}')
		if r.Failed {
			b = append(b, `,"failed":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, `},"errorsWhileComputingFlags":`...)
	b = appendBool(b, errored)
	b = append(b, `,"requestId":`...)
	b = appendUUID(b, rand.Uint64(), rand.Uint64())
	b = append(b, `,"evaluatedAt":`...)
	b = appendInt(b, time.Now().UnixMilli())
	return append(b, '}')
}

// WriteError answers with the API's error body.
func WriteError(ctx *fasthttp.RequestCtx, status int, typ, code, detail string) {
	b := make([]byte, 0, 128+len(detail))
	b = append(b, `{"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"code":`...)
	b = appendString(b, code)
	b = append(b, `,"detail":`...)
	b = appendString(b, detail)
	b = append(b, `,"attr":null}`...)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
