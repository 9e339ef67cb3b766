package capture

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fastjson"

	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// Results of stamping an event, as counted.
const (
	resultAccepted     = "accepted"
	resultNoName       = "dropped_no_event_name"
	resultNoDistinctID = "dropped_no_distinct_id"
	resultBadUUID      = "dropped_invalid_uuid"
	resultBadProps     = "dropped_invalid_properties"
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
		return nil, resultBadProps
	}
	return &syncpb.CapturedEvent{
		Uuid: id, Event: e.Name, DistinctId: e.DistinctID, Properties: props,
		TimestampUs: event.EventTime(e, sentAt, now).UnixMicro(), ReceivedUs: now.UnixMicro(),
	}, resultAccepted
}

// idProperties are properties that ingestion stores as ids (in indexed columns): they are cut
// to event.MaxIDRunes characters like distinct ids.
var idProperties = []string{"$anon_distinct_id", "alias", "$group_key", "$group_type"}

// enrich adds to an event's properties what the edge knows: the client IP as $ip (unless
// the event has one), its $geoip_* properties, and top-level $set/$set_once, unless
// $geoip_disable is set; and it cuts over-long ids. Plain cases are spliced into the JSON
// without decoding it.
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
	var replace map[string][]byte // rare: members whose value changes
	for _, key := range idProperties {
		if s := pv.GetStringBytes(key); len(s) > event.MaxIDRunes {
			if cut := event.CleanString(string(s), event.MaxIDRunes); cut != string(s) {
				if replace == nil {
					replace = map[string][]byte{}
				}
				replace[key], _ = json.Marshal(cut)
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
			if replace == nil {
				replace = map[string][]byte{}
			}
			replace[set.key] = merged
			continue
		}
		add(set.key, set.raw)
	}
	if replace != nil {
		return spliceReplacing(e.Properties, replace, extra)
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

// spliceReplacing rebuilds obj with the replaced members and members added (the rare cases of
// a $set both at the top level and in properties, or an over-long id).
func spliceReplacing(obj []byte, replace map[string][]byte, members []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	for k, v := range replace {
		m[k] = v
	}
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
