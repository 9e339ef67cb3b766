package ofrep

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/flagedge/flagedge/edge/jsonenc"
	"github.com/flagedge/flagedge/edge/state"
	"github.com/flagedge/flagedge/shared/flags"
)

// flagInfo is what OFREP's answer needs of a flag beyond its result: how its conditions decide
// (for the reason) and what type its value has.
type flagInfo struct {
	// multivariate: an enabled flag's value is its variant key.
	multivariate bool
	// object: every value of the flag has a JSON object or array payload, and an enabled flag's
	// value is that payload (OpenFeature's object type).
	object bool
	// split and static are per condition: split when a hash decided (a rollout under 100% or
	// a variant picked by hash), static when the condition holds for everyone (the first
	// condition, no properties, no hash, no groups, super or holdout conditions before it).
	split, static []bool
}

// projectInfo is the flagInfo of every flag of one project version, in the snapshot's order
// (that of its results).
type projectInfo struct {
	version int64
	flags   []flagInfo
}

func (pi *projectInfo) flag(i int) *flagInfo {
	if i < len(pi.flags) {
		return &pi.flags[i]
	}
	return &flagInfo{}
}

// infoCache keeps the projectInfo of each project's current version, built on its first
// OFREP request.
type infoCache struct {
	mu sync.Mutex // guards m
	m  map[int64]*projectInfo
}

func (c *infoCache) of(p *state.Project) *projectInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pi := c.m[p.ID]; pi != nil && pi.version == p.Version {
		return pi
	}
	if c.m == nil {
		c.m = map[int64]*projectInfo{}
	}
	pi := buildInfo(p)
	c.m[p.ID] = pi
	return pi
}

func buildInfo(p *state.Project) *projectInfo {
	src := p.Snapshot.Source()
	pi := &projectInfo{version: p.Version, flags: make([]flagInfo, len(src.Flags))}
	for i, f := range src.Flags {
		parsed, err := flags.ParseFilters(f.Filters)
		if err != nil {
			continue // the snapshot compiled it, so this does not happen
		}
		fi := &pi.flags[i]
		fi.multivariate = parsed.Multivariate != nil && len(parsed.Multivariate.Variants) > 0
		fi.object = objectPayloads(parsed, fi.multivariate)
		plain := parsed.AggregationGroupTypeIndex == nil && len(parsed.SuperGroups) == 0 && len(parsed.HoldoutGroups) == 0
		fi.split, fi.static = make([]bool, len(parsed.Groups)), make([]bool, len(parsed.Groups))
		for ci, c := range parsed.Groups {
			partial := c.RolloutPercentage != nil && *c.RolloutPercentage < 100
			hashed := fi.multivariate && (c.Variant == nil || *c.Variant == "")
			fi.split[ci] = partial || hashed
			fi.static[ci] = ci == 0 && plain && len(c.Properties) == 0 && !fi.split[ci]
		}
	}
	return pi
}

// objectPayloads reports whether every value of the flag (true, or each variant) has a
// payload that is a JSON object or array.
func objectPayloads(f *flags.Filters, multivariate bool) bool {
	keys := []string{"true"}
	if multivariate {
		keys = keys[:0]
		for _, v := range f.Multivariate.Variants {
			keys = append(keys, v.Key)
		}
	}
	for _, k := range keys {
		p := payloadText(f.Payloads[k])
		if len(p) == 0 || (p[0] != '{' && p[0] != '[') || !json.Valid(p) {
			return false
		}
	}
	return len(keys) > 0
}

// payloadText is a stored payload as the JSON text it holds: payloads are stored as JSON
// strings of JSON (as PostHog keeps them) or, from older writers, as the JSON itself.
func payloadText(raw json.RawMessage) []byte {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return bytes.TrimSpace([]byte(s))
	}
	return raw
}

// reason maps the engine's reason to OpenFeature's.
func reason(r *flags.Result, fi *flagInfo) string {
	switch r.Reason {
	case flags.ReasonDisabled:
		return "DISABLED"
	case flags.ReasonError:
		return "ERROR"
	case flags.ReasonOutOfRolloutBound, flags.ReasonHoldoutConditionValue:
		return "SPLIT"
	case flags.ReasonSuperConditionValue:
		return "TARGETING_MATCH"
	case flags.ReasonConditionMatch:
		if i := r.ConditionIndex; i >= 0 && i < len(fi.split) {
			switch {
			case fi.split[i]:
				return "SPLIT"
			case fi.static[i]:
				return "STATIC"
			}
		}
		return "TARGETING_MATCH"
	}
	return "DEFAULT" // no condition matched, or the flag's group is not in the context
}

// appendEvaluation writes one flag's evaluationSuccess. The value is true or false for a
// boolean flag, the variant key for an enabled multivariate flag and the payload for an
// enabled object flag; a multivariate or object flag that is not enabled has no value (OFREP's
// code default: the caller's default applies). metadata carries the flag's id and version
// and, when the value has one, its payload as a JSON string.
func appendEvaluation(b []byte, r *flags.Result, fi *flagInfo) []byte {
	b = append(b, `{"key":`...)
	b = jsonenc.AppendString(b, r.Key)
	switch {
	case r.Enabled && fi.object && r.Payload != nil:
		b = append(b, `,"value":`...)
		b = append(b, payloadText(r.Payload)...)
	case r.Enabled && r.Variant != "":
		b = append(b, `,"value":`...)
		b = jsonenc.AppendString(b, r.Variant)
	case !fi.multivariate && !fi.object:
		b = append(b, `,"value":`...)
		b = jsonenc.AppendBool(b, r.Enabled)
	}
	b = append(b, `,"reason":`...)
	b = jsonenc.AppendString(b, reason(r, fi))
	switch {
	case r.Variant != "":
		b = append(b, `,"variant":`...)
		b = jsonenc.AppendString(b, r.Variant)
	case !fi.multivariate && r.Enabled:
		b = append(b, `,"variant":"true"`...)
	case !fi.multivariate:
		b = append(b, `,"variant":"false"`...)
	}
	b = append(b, `,"metadata":{"id":`...)
	b = jsonenc.AppendInt(b, r.ID)
	b = append(b, `,"version":`...)
	b = jsonenc.AppendInt(b, int64(r.Version))
	if r.Payload != nil && r.Enabled {
		b = append(b, `,"payload":`...)
		b = jsonenc.AppendString(b, string(payloadText(r.Payload)))
	}
	return append(b, "}}"...)
}
