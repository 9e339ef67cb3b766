// Package capture serves the edge's capture endpoints (/capture, /batch, /e, /i/v0/e,
// /track, /engage): it decodes and validates events, stamps them (uuid, server-side
// timestamp, client IP, GeoIP), appends them to the durable spool before answering, and
// forwards the spool to the control plane.
package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/admit"
	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/reqbody"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/bloomkeys"
	"github.com/flagedge/flagedge/shared/clientip"
	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// MaxBodyBytes bounds a capture request, compressed or not.
const MaxBodyBytes = 20 << 20

// Limits is what one capture request may hold (docs/api.md, "Limits"), checked before its
// events are parsed. PostHog publishes the body (20 MB) and event (1 MB) limits; the others
// are the edge's own, far above what SDKs send (they batch 100 to 250 events, posthog-node
// halves its batch on a 413), so that what a request costs to parse is bounded.
var Limits = event.Limits{
	MaxEvents:      10_000,
	MaxValues:      500_000,
	MaxProperties:  10_000,
	MaxDepth:       64,
	MaxKeyBytes:    1 << 10,
	MaxStringBytes: event.MaxEventBytes,
}

// What parsing, stamping and spooling a body costs beyond its text, estimated from the
// structures involved (not measured per request): the text about four times over (the
// parser's copy, each event's properties, its stamped record, the spool record), about 160
// bytes per parsed JSON value (fastjson's value and key entry, with slack), and about 1 KiB
// per event (its Event, protobuf message and uuid, time and IP strings).
const (
	costPerByte  = 4
	costPerValue = 160
	costPerEvent = 1 << 10
)

// parseCost is what decoding a body of n bytes holding st costs in memory, to reserve from
// the in-flight budget before it is parsed.
func parseCost(n int, st event.Stats) int {
	return costPerByte*n + costPerValue*st.Values + costPerEvent*st.Events
}

// largeBody is the size above which a request's parser is dropped after use rather than
// pooled: the pool would keep the memory of the largest batch it ever parsed.
const largeBody = 1 << 20

// PersonCache is told about person property changes the edge captures, so that /decide at
// this edge sees them before the control plane has stored them, and about the persons and
// groups the captured events will make the control plane store (membership keys).
type PersonCache interface {
	ApplyPersonUpdate(projectID int64, distinctID string, set, setOnce flags.Properties, unset []string)
	Captured(projectID int64, keys [][]byte)
}

// Handler serves the capture endpoints.
type Handler struct {
	state   *state.Holder
	spool   *spool.Spool
	geo     *geocache.Locator
	ips     *clientip.Resolver // nil: X-Forwarded-For trusted
	budget  *reqbody.Budget    // nil: unbounded
	limiter *admit.Limiter     // nil: no rate limits
	persons PersonCache        // may be nil
	log     *slog.Logger
	now     func() time.Time
	parsers fastjson.ParserPool
	events  *prometheus.CounterVec

	// unavailable counts the requests refused since logUnavailable last logged.
	unavailable    atomic.Int64
	logUnavailable rate.Sometimes
}

// NewHandler returns the capture handler. locator, ips, budget, limiter and persons may be
// nil.
func NewHandler(h *state.Holder, sp *spool.Spool, locator *geocache.Locator, ips *clientip.Resolver, budget *reqbody.Budget,
	limiter *admit.Limiter, persons PersonCache, log *slog.Logger, reg prometheus.Registerer) *Handler {
	c := &Handler{state: h, spool: sp, geo: locator, ips: ips, budget: budget, limiter: limiter, persons: persons, log: log, now: time.Now,
		logUnavailable: rate.Sometimes{Interval: unavailableLogInterval},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_edge_capture_events_total",
			Help: "Captured events by result: accepted, or the reason they were not ingested."}, []string{"result"})}
	if reg != nil {
		reg.MustRegister(c.events)
	}
	return c
}

// Serve handles one capture request, or returns the *apierror.Error to answer; engage marks
// /engage, whose events default to $identify. The request goes through one straight line:
// decode, parse, find the project, stamp each event, append the batch to the spool, and only
// then acknowledge.
func (c *Handler) Serve(ctx *fasthttp.RequestCtx, engage bool) error {
	now := c.now()
	lease := c.budget.Lease()
	defer lease.Release()
	payload, err := c.decode(ctx, &lease)
	if err != nil {
		return err
	}
	project, err := c.project(ctx, payload)
	if err != nil {
		return err
	}
	if payload.SentAt.IsZero() {
		if ms, err := strconv.ParseInt(string(ctx.QueryArgs().Peek("_")), 10, 64); err == nil && ms > 0 {
			payload.SentAt = time.UnixMilli(ms)
		}
	}
	clientIP := c.ips.ClientIP(ctx.Request.Header.PeekAll("X-Forwarded-For"), ctx.RemoteIP())
	batch := &syncpb.EventBatch{ProjectId: project.ID, HistoricalMigration: payload.HistoricalMigration}
	for i := range payload.Events {
		e := &payload.Events[i]
		if engage && e.Name == "" {
			e.Name = "$identify"
		}
		pb, result := c.stamp(e, payload.SentAt, now, clientIP)
		c.events.WithLabelValues(result).Inc()
		if pb != nil {
			batch.Events = append(batch.Events, pb)
		}
	}
	if len(batch.Events) > 0 {
		if err := c.append(batch); err != nil {
			return err
		}
		c.updatePersons(project.ID, batch.Events)
		countFlagCalls(project, batch.Events)
		if c.persons != nil {
			c.persons.Captured(project.ID, storedKeys(project, batch.Events))
		}
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":1}`)
	return nil
}

// decode reads the body (or GET ?data=) in any of the SDKs' encodings, checks it against
// Limits and parses its events, holding the memory all this takes in lease.
func (c *Handler) decode(ctx *fasthttp.RequestCtx, lease *reqbody.Lease) (*event.Payload, error) {
	var raw []byte
	if !ctx.IsGet() {
		var err error
		if raw, err = reqbody.Read(ctx, MaxBodyBytes, lease); err != nil {
			return nil, reqbody.AsAPIError(err, errBodyTooLarge)
		}
	}
	if len(raw) == 0 {
		raw = ctx.QueryArgs().Peek("data") // bounded by the header size limit
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, apierror.Malformed("no data found.")
	}
	body, err := reqbody.Decode(ctx, raw, MaxBodyBytes, lease)
	if err != nil {
		return nil, reqbody.AsAPIError(err, errBodyTooLarge)
	}
	st, err := event.Scan(body, Limits)
	if err != nil {
		return nil, reqbody.AsAPIError(err, errBodyTooLarge)
	}
	if err := lease.Reserve(parseCost(len(body), st)); err != nil {
		return nil, reqbody.AsAPIError(err, errBodyTooLarge)
	}
	parser := c.parsers.Get()
	payload, err := event.ParseCapture(parser, body)
	if len(body) <= largeBody {
		c.parsers.Put(parser)
	}
	if errors.Is(err, event.ErrEventTooLarge) {
		return nil, apierror.TooLarge("An event is over 1 MB.")
	}
	if err != nil {
		return nil, apierror.Malformed(err.Error())
	}
	return payload, nil
}

var errBodyTooLarge = apierror.TooLarge("The request body is over 20 MB.")

// maxRecordBytes bounds one spool record: the forwarder sends records whole, so each must fit
// one Ingest call (64 MiB) and be stored well within its timeout, whatever a request holds.
const maxRecordBytes = 1 << 20

// append makes the batch durable in the spool, in records of at most about maxRecordBytes,
// all or none; a full spool is answered 503, which SDKs retry.
func (c *Handler) append(batch *syncpb.EventBatch) error {
	var records [][]byte
	part := &syncpb.EventBatch{ProjectId: batch.ProjectId, HistoricalMigration: batch.HistoricalMigration}
	size := 0
	flush := func() error {
		record, err := proto.Marshal(part)
		if err != nil {
			return err
		}
		records = append(records, record)
		part = &syncpb.EventBatch{ProjectId: batch.ProjectId, HistoricalMigration: batch.HistoricalMigration}
		size = 0
		return nil
	}
	for _, e := range batch.Events {
		n := proto.Size(e)
		if size > 0 && size+n > maxRecordBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		part.Events = append(part.Events, e)
		size += n
	}
	err := flush()
	if err == nil {
		err = c.spool.Append(records...)
	}
	if err != nil {
		c.unavailable.Add(1)
		c.logUnavailable.Do(func() {
			level := slog.LevelError
			if errors.Is(err, spool.ErrFull) {
				level = slog.LevelWarn
			}
			c.log.Log(context.Background(), level, "capture answers 503: the spool cannot take events", "err", err,
				"refused_since_last_log", c.unavailable.Swap(0))
		})
		return apierror.CaptureUnavailable
	}
	return nil
}

// unavailableLogInterval is how often at most a spool that cannot take events is logged: a
// full spool refuses every request, and a line per request would flood the log.
const unavailableLogInterval = 10 * time.Second

// project resolves the request's project from its token, or from a personal API key and a
// project_id.
func (c *Handler) project(ctx *fasthttp.RequestCtx, p *event.Payload) (*state.Project, error) {
	token := p.Token
	for _, e := range p.Events {
		switch {
		case e.Token == "":
		case token == "":
			token = e.Token
		case e.Token != token && p.Token == "":
			return nil, apierror.MixedAPIKeys
		}
	}
	if token == "" {
		token = firstArg(ctx, "token", "api_key")
	}
	if token == "" {
		return nil, apierror.NoAPIKey
	}
	if !c.state.Ready() {
		return nil, apierror.NotReady
	}
	if strings.HasPrefix(token, "phx_") {
		return c.projectForPersonalKey(ctx, p, token)
	}
	project := c.state.ByToken(token)
	if project == nil {
		return nil, apierror.InvalidAPIKey
	}
	if c.limiter != nil {
		if r, ok := c.limiter.Project(project.ID, time.Now()); !ok {
			return nil, apierror.RateLimited(r.RetryAfter)
		}
	}
	return project, nil
}

// projectForPersonalKey resolves events sent with a personal API key: they must name their
// project in project_id (body or query), and the key must be one of that project's.
func (c *Handler) projectForPersonalKey(ctx *fasthttp.RequestCtx, p *event.Payload, key string) (*state.Project, error) {
	projectID := p.ProjectID
	if projectID == "" {
		projectID = firstArg(ctx, "project_id")
	}
	id, err := strconv.ParseInt(projectID, 10, 64)
	project := c.state.ByID(id)
	if err != nil || project == nil {
		return nil, apierror.InvalidProject
	}
	if project.DefinitionsAccess(key) == state.AccessUnknown {
		return nil, apierror.InvalidPersonalAPIKey
	}
	return project, nil
}

func firstArg(ctx *fasthttp.RequestCtx, names ...string) string {
	for _, n := range names {
		if v := ctx.QueryArgs().Peek(n); len(v) > 0 {
			return string(v)
		}
	}
	return ""
}

// storedKeys returns the membership keys of what storing the events makes the control plane
// hold: persons for their distinct ids (and merged or aliased ids), groups they identify.
func storedKeys(project *state.Project, events []*syncpb.CapturedEvent) [][]byte {
	keys := make([][]byte, 0, len(events))
	for _, e := range events {
		var props map[string]any
		if bloomkeys.ReadsProperties(e.Event) {
			_ = json.Unmarshal(e.Properties, &props) // stamped: an object
		}
		ids, groupType, groupKey := bloomkeys.EventRefs(e.Event, e.DistinctId, props)
		for _, id := range ids {
			keys = append(keys, bloomkeys.PersonKey(nil, id))
		}
		if groupType == "" {
			continue
		}
		for i := range 5 {
			if project.Snapshot.GroupTypeName(i) == groupType {
				keys = append(keys, bloomkeys.GroupKey(nil, i, groupKey))
			}
		}
	}
	return keys
}

// countFlagCalls adds the $feature_flag_called events (an SDK's report that code read a
// flag) to the project's evaluation counters, by $feature_flag and $feature_flag_response.
func countFlagCalls(project *state.Project, events []*syncpb.CapturedEvent) {
	if project.Counts == nil {
		return
	}
	for _, e := range events {
		if e.Event != "$feature_flag_called" {
			continue
		}
		var props struct {
			Flag     string `json:"$feature_flag"`
			Response any    `json:"$feature_flag_response"`
		}
		if json.Unmarshal(e.Properties, &props) != nil {
			continue
		}
		switch v := props.Response.(type) {
		case bool:
			project.Counts.ByKey(props.Flag).Add(v, "")
		case string:
			switch v {
			case "true":
				project.Counts.ByKey(props.Flag).Add(true, "")
			case "false", "":
				project.Counts.ByKey(props.Flag).Add(false, "")
			default:
				project.Counts.ByKey(props.Flag).Add(true, v)
			}
		}
	}
}

// updatePersons tells the person cache about $set, $set_once and $unset in accepted events.
func (c *Handler) updatePersons(projectID int64, events []*syncpb.CapturedEvent) {
	if c.persons == nil {
		return
	}
	for _, e := range events {
		if !bytes.Contains(e.Properties, []byte(`"$set`)) && !bytes.Contains(e.Properties, []byte(`"$unset"`)) {
			continue
		}
		var props struct {
			Set     flags.Properties `json:"$set"`
			SetOnce flags.Properties `json:"$set_once"`
			Unset   []string         `json:"$unset"`
		}
		if json.Unmarshal(e.Properties, &props) != nil {
			continue
		}
		if len(props.Set)+len(props.SetOnce)+len(props.Unset) > 0 {
			c.persons.ApplyPersonUpdate(projectID, e.DistinctId, props.Set, props.SetOnce, props.Unset)
		}
	}
}
