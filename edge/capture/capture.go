// Package capture serves the edge's capture endpoints (/capture, /batch, /e, /i/v0/e,
// /track, /engage): it decodes and validates events, stamps them (uuid, server-side
// timestamp, client IP, GeoIP), appends them to the durable spool before answering, and
// forwards the spool to the control plane.
package capture

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"google.golang.org/protobuf/proto"

	"github.com/flagedge/flagedge/edge/apierror"
	"github.com/flagedge/flagedge/edge/clientip"
	"github.com/flagedge/flagedge/edge/geocache"
	"github.com/flagedge/flagedge/edge/spool"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// MaxBodyBytes bounds a capture request, compressed or not.
const MaxBodyBytes = 20 << 20

// PersonCache is told about person property changes the edge captures, so that /decide at
// this edge sees them before the control plane has stored them.
type PersonCache interface {
	ApplyPersonUpdate(projectID int64, distinctID string, set, setOnce flags.Properties, unset []string)
}

// Handler serves the capture endpoints.
type Handler struct {
	state   *state.Holder
	spool   *spool.Spool
	geo     *geocache.Locator
	persons PersonCache // may be nil
	log     *slog.Logger
	now     func() time.Time
	parsers fastjson.ParserPool
	events  *prometheus.CounterVec
}

// NewHandler returns the capture handler.
func NewHandler(h *state.Holder, sp *spool.Spool, locator *geocache.Locator, persons PersonCache, log *slog.Logger, reg prometheus.Registerer) *Handler {
	c := &Handler{state: h, spool: sp, geo: locator, persons: persons, log: log, now: time.Now,
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
	payload, err := c.decode(ctx)
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
	clientIP := clientip.FromRequest(ctx.Request.Header.Peek("X-Forwarded-For"), ctx.RemoteIP())
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
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":1}`)
	return nil
}

// decode reads the body (or GET ?data=) in any of the SDKs' encodings and parses its events.
func (c *Handler) decode(ctx *fasthttp.RequestCtx) (*event.Payload, error) {
	raw := ctx.PostBody()
	if ctx.IsGet() || len(raw) == 0 {
		if data := ctx.QueryArgs().Peek("data"); len(data) > 0 {
			raw = data
		}
	}
	if len(raw) > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, apierror.Malformed("no data found.")
	}
	body, err := event.Decode(event.Request{
		Body:            raw,
		Compression:     string(ctx.QueryArgs().Peek("compression")),
		ContentType:     string(ctx.Request.Header.ContentType()),
		ContentEncoding: string(ctx.Request.Header.ContentEncoding()),
	}, MaxBodyBytes)
	if errors.Is(err, event.ErrTooLarge) {
		return nil, errBodyTooLarge
	}
	if err != nil {
		return nil, apierror.Malformed(err.Error())
	}
	parser := c.parsers.Get()
	payload, err := event.ParseCapture(parser, body)
	c.parsers.Put(parser)
	if errors.Is(err, event.ErrEventTooLarge) {
		return nil, apierror.TooLarge("An event is over 1 MB.")
	}
	if err != nil {
		return nil, apierror.Malformed(err.Error())
	}
	return payload, nil
}

var errBodyTooLarge = apierror.TooLarge("The request body is over 20 MB.")

// append makes the batch durable in the spool; a full spool is answered 503, which SDKs retry.
func (c *Handler) append(batch *syncpb.EventBatch) error {
	record, err := proto.Marshal(batch)
	if err == nil {
		err = c.spool.Append(record)
	}
	if err != nil && !errors.Is(err, spool.ErrFull) {
		c.log.Error("spool append failed", "err", err)
	}
	if err != nil {
		return apierror.CaptureUnavailable
	}
	return nil
}

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

// Results of stamping an event, as counted.
const (
	resultAccepted     = "accepted"
	resultNoName       = "dropped_no_event_name"
	resultNoDistinctID = "dropped_no_distinct_id"
	resultBadUUID      = "dropped_invalid_uuid"
)

// stamp validates an event and gives it its uuid, timestamp and enriched properties.
func (c *Handler) stamp(e *event.Event, sentAt, now time.Time, clientIP netip.Addr) (*syncpb.CapturedEvent, string) {
	switch {
	case e.Name == "":
		return nil, resultNoName
	case e.DistinctID == "":
		return nil, resultNoDistinctID
	}
	id := e.UUID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			u = uuid.New()
		}
		id = u.String()
	} else if u, err := uuid.Parse(id); err != nil {
		return nil, resultBadUUID
	} else {
		id = u.String()
	}
	props, err := c.enrich(e, clientIP)
	if err != nil {
		return nil, "dropped_invalid_properties"
	}
	return &syncpb.CapturedEvent{
		Uuid: id, Event: e.Name, DistinctId: e.DistinctID, Properties: props,
		TimestampUs: event.EventTime(e, sentAt, now).UnixMicro(), ReceivedUs: now.UnixMicro(),
	}, resultAccepted
}

// enrich adds to an event's properties what the edge knows: the client IP as $ip (unless
// the event has one), its $geoip_* properties, and top-level $set/$set_once, unless
// $geoip_disable is set. Plain cases are spliced into the JSON without decoding it.
func (c *Handler) enrich(e *event.Event, clientIP netip.Addr) ([]byte, error) {
	p := c.parsers.Get()
	defer c.parsers.Put(p)
	pv, err := p.ParseBytes(e.Properties)
	if err != nil {
		return nil, err
	}
	extra := make([]byte, 0, 256)
	add := func(key string, value []byte) {
		if len(extra) > 0 {
			extra = append(extra, ',')
		}
		extra = strconv.AppendQuote(extra, key)
		extra = append(extra, ':')
		extra = append(extra, value...)
	}
	if !pv.GetBool("$geoip_disable") {
		ip := clientIP
		if s := pv.GetStringBytes("$ip"); s != nil {
			if a, err := netip.ParseAddr(string(s)); err == nil {
				ip = a
			}
		} else if clientIP.IsValid() {
			q, _ := json.Marshal(clientIP.String())
			add("$ip", q)
		}
		for k, v := range c.geo.Lookup(ip) {
			if pv.Get(k) == nil {
				enc, _ := json.Marshal(v)
				add(k, enc)
			}
		}
	}
	for _, set := range []struct {
		key string
		raw []byte
	}{{"$set", e.Set}, {"$set_once", e.SetOnce}} {
		if set.raw == nil {
			continue
		}
		if inner := pv.Get(set.key); inner != nil && inner.Type() == fastjson.TypeObject {
			merged, err := mergeObjects(set.raw, inner.MarshalTo(nil))
			if err != nil {
				return nil, err
			}
			return spliceReplacing(e.Properties, set.key, merged, extra)
		}
		add(set.key, set.raw)
	}
	return splice(e.Properties, extra), nil
}

// splice appends members (already encoded, comma-separated) to a JSON object.
func splice(obj, members []byte) []byte {
	if len(members) == 0 {
		return obj
	}
	obj = bytes.TrimSpace(obj)
	out := make([]byte, 0, len(obj)+len(members)+2)
	out = append(out, obj[:len(obj)-1]...)
	if len(bytes.TrimSpace(obj[1:len(obj)-1])) > 0 {
		out = append(out, ',')
	}
	out = append(out, members...)
	return append(out, '}')
}

// spliceReplacing rebuilds obj with key set to value and members added (the rare case of a
// $set both at the top level and in properties).
func spliceReplacing(obj []byte, key string, value, members []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	m[key] = value
	if len(members) > 0 {
		var extra map[string]json.RawMessage
		if err := json.Unmarshal(append(append([]byte{'{'}, members...), '}'), &extra); err != nil {
			return nil, err
		}
		for k, v := range extra {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// mergeObjects merges JSON objects; keys of the later win.
func mergeObjects(objs ...[]byte) ([]byte, error) {
	out := map[string]json.RawMessage{}
	for _, o := range objs {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o, &m); err != nil {
			return nil, err
		}
		for k, v := range m {
			out[k] = v
		}
	}
	return json.Marshal(out)
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
