package event

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fastjson"
)

// Payload is a decoded capture request: a single event, an array of events, or a batch.
type Payload struct {
	// Token is the body-level token (api_key, token or $token) of a batch.
	Token string
	// ProjectID is the body's project_id, for requests made with a personal API key.
	ProjectID           string
	HistoricalMigration bool
	// SentAt is the client's clock when it sent the request, when it said.
	SentAt time.Time
	Events []Event
}

// Event is one event as a client sent it. Its byte slices are its own.
type Event struct {
	// Token is the event's own token, if it carries one.
	Token      string
	Name       string
	DistinctID string
	UUID       string
	// Timestamp is when the event happened by the client's clock; zero when not sent.
	Timestamp time.Time
	// Offset is how many milliseconds before sending the event happened; -1 when not sent.
	Offset int64
	// Properties is the properties object as JSON ("{}" when absent).
	Properties []byte
	// Set and SetOnce are top-level $set and $set_once objects as JSON, or nil.
	Set, SetOnce []byte
	// Size is the event's size in the request, in bytes.
	Size int
}

// MaxEventBytes is the largest single event accepted.
const MaxEventBytes = 1 << 20

// ErrEventTooLarge reports an event over MaxEventBytes.
var ErrEventTooLarge = errors.New("event too large")

// ParseCapture reads a decoded capture body with parser p. What PostgreSQL could not store is
// made storable first (CleanJSON), and names and ids are cut to MaxIDRunes characters, so that
// every event it returns can be stored.
func ParseCapture(p *fastjson.Parser, body []byte) (*Payload, error) {
	v, err := p.ParseBytes(CleanJSON(body))
	if err != nil {
		return nil, invalid("%v", err)
	}
	out := &Payload{}
	switch v.Type() {
	case fastjson.TypeArray:
		arr, _ := v.Array()
		for _, e := range arr {
			if err := out.addEvent(e); err != nil {
				return nil, err
			}
		}
	case fastjson.TypeObject:
		out.Token = firstString(v, "api_key", "token", "$token")
		out.ProjectID = scalar(v.Get("project_id"))
		out.HistoricalMigration = v.GetBool("historical_migration")
		if s := v.Get("sent_at"); s != nil {
			out.SentAt = parseTime(s)
		}
		if batch := v.Get("batch"); batch != nil {
			arr, err := batch.Array()
			if err != nil {
				return nil, invalid("batch must be a list of events")
			}
			for _, e := range arr {
				if err := out.addEvent(e); err != nil {
					return nil, err
				}
			}
			break
		}
		if data := v.Get("data"); data != nil && data.Type() == fastjson.TypeArray {
			arr, _ := data.Array()
			for _, e := range arr {
				if err := out.addEvent(e); err != nil {
					return nil, err
				}
			}
			break
		}
		if err := out.addEvent(v); err != nil {
			return nil, err
		}
	default:
		return nil, invalid("expected an event, a list of events or a batch")
	}
	return out, nil
}

func (p *Payload) addEvent(v *fastjson.Value) error {
	if v.Type() != fastjson.TypeObject {
		return invalid("every event must be an object")
	}
	raw := v.MarshalTo(nil)
	if len(raw) > MaxEventBytes {
		return ErrEventTooLarge
	}
	e := Event{Size: len(raw), Offset: -1, Properties: []byte("{}")}
	e.Token = firstString(v, "api_key", "token", "$token")
	e.Name = CleanString(firstString(v, "event"), MaxIDRunes)
	e.UUID = firstString(v, "uuid")
	props := v.Get("properties")
	if props != nil && props.Type() == fastjson.TypeObject {
		e.Properties = props.MarshalTo(nil)
		if e.Token == "" {
			e.Token = firstString(props, "token", "$token")
		}
	}
	e.DistinctID = scalar(v.Get("distinct_id"))
	if e.DistinctID == "" {
		e.DistinctID = scalar(v.Get("$distinct_id"))
	}
	if e.DistinctID == "" && props != nil {
		e.DistinctID = scalar(props.Get("distinct_id"))
	}
	e.DistinctID = CleanString(e.DistinctID, MaxIDRunes)
	if ts := v.Get("timestamp"); ts != nil {
		e.Timestamp = parseTime(ts)
	}
	if off := v.Get("offset"); off != nil && off.Type() == fastjson.TypeNumber {
		if ms, err := off.Int64(); err == nil && ms >= 0 {
			e.Offset = ms
		}
	}
	if set := v.Get("$set"); set != nil && set.Type() == fastjson.TypeObject {
		e.Set = set.MarshalTo(nil)
	}
	if set := v.Get("$set_once"); set != nil && set.Type() == fastjson.TypeObject {
		e.SetOnce = set.MarshalTo(nil)
	}
	p.Events = append(p.Events, e)
	return nil
}

func firstString(v *fastjson.Value, keys ...string) string {
	for _, k := range keys {
		if s := v.Get(k); s != nil && s.Type() == fastjson.TypeString {
			if b := s.GetStringBytes(); len(b) > 0 {
				return string(b)
			}
		}
	}
	return ""
}

// scalar is the string form of a string or number value ("" otherwise).
func scalar(v *fastjson.Value) string {
	if v == nil {
		return ""
	}
	switch v.Type() {
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		return string(v.MarshalTo(nil))
	}
	return ""
}

// parseTime reads an ISO 8601 time, or milliseconds since the epoch.
func parseTime(v *fastjson.Value) time.Time {
	switch v.Type() {
	case fastjson.TypeString:
		s := string(bytes.TrimSpace(v.GetStringBytes()))
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00",
			"2006-01-02 15:04:05.999999999", "2006-01-02"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t
			}
		}
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.UnixMilli(ms)
		}
	case fastjson.TypeNumber:
		if ms, err := v.Float64(); err == nil {
			return time.UnixMilli(int64(ms))
		}
	}
	return time.Time{}
}

// EventTime is when an event happened, by the server's clock (docs/api.md, Capture): a client
// timestamp is corrected by the client's clock skew when the request said when it was sent;
// an offset counts back from the receive time; without either the client's timestamp is
// used, and without one the receive time, as it is for a time more than 23 hours ahead or
// outside the years 1 to 9999.
func EventTime(e *Event, sentAt, now time.Time) time.Time {
	var t time.Time
	switch {
	case !e.Timestamp.IsZero() && !sentAt.IsZero():
		t = now.Add(e.Timestamp.Sub(sentAt))
	case e.Offset >= 0:
		t = now.Add(-time.Duration(e.Offset) * time.Millisecond)
	case !e.Timestamp.IsZero():
		t = e.Timestamp
	default:
		return now
	}
	if t.After(now.Add(23*time.Hour)) || t.Year() < 1 || t.Year() > 9999 {
		return now // PostgreSQL (and JavaScript) cannot hold years outside 1 to 9999 either
	}
	return t
}
