// Package personview holds what captured events mean for persons and groups: $identify
// and $create_alias merge persons, $set/$set_once/$unset change their properties, and
// $groupidentify creates or updates groups. It applies events in order to an in-memory View
// of the persons and groups they touch; the store loads the view and writes back its changes.
package personview

import (
	"bytes"
	"encoding/json"

	"github.com/flagedge/flagedge/shared/bloomkeys"
)

// MaxGroupTypes is how many group types a project may have (indexes 0–4).
const MaxGroupTypes = 5

// Person is a person in the view. ID is 0 for a person this batch creates.
type Person struct {
	ID          int64
	Properties  map[string]any
	Identified  bool
	DistinctIDs []string
	Dirty       bool // properties or identification changed
	// MergedInto is set when this person was merged into another and must be deleted.
	MergedInto *Person
}

// GroupKey names a group.
type GroupKey struct {
	TypeIndex int
	Key       string
}

// Group is a group in the view.
type Group struct {
	Properties map[string]any
	Exists     bool
	Dirty      bool
}

// View is the state that a batch of events changes.
type View struct {
	// ByDistinctID maps every known distinct id to its person.
	ByDistinctID map[string]*Person
	// GroupTypes maps group type names to indexes; NewGroupTypes lists those the batch added.
	GroupTypes    map[string]int
	NewGroupTypes []string
	Groups        map[GroupKey]*Group
	// Merged lists the persons merged into others, to be deleted.
	Merged []*Person
	// Ignored counts group identifies beyond MaxGroupTypes.
	Ignored int
}

// NewView returns an empty view.
func NewView() *View {
	return &View{ByDistinctID: map[string]*Person{}, GroupTypes: map[string]int{}, Groups: map[GroupKey]*Group{}}
}

// Event is what ingestion needs of an event.
type Event struct {
	Name       string
	DistinctID string
	Properties json.RawMessage
}

// NeedsState reports whether an event changes persons or groups beyond making sure its
// distinct id has a person (which the store does in bulk).
func NeedsState(e Event) bool {
	switch e.Name {
	case "$identify", "$create_alias", "$groupidentify", "$merge_dangerously":
		return true
	}
	return bytes.Contains(e.Properties, []byte(`"$set`)) || bytes.Contains(e.Properties, []byte(`"$unset"`))
}

// Refs returns the distinct ids and groups an event touches, for the store to load: what
// shared/bloomkeys.EventRefs says storing it makes the control plane hold.
func Refs(e Event) (distinctIDs []string, groups []GroupRef) {
	var props map[string]any
	if bloomkeys.ReadsProperties(e.Name) {
		props = decode(e.Properties)
	}
	distinctIDs, groupType, groupKey := bloomkeys.EventRefs(e.Name, e.DistinctID, props)
	if groupType != "" {
		groups = append(groups, GroupRef{Type: groupType, Key: groupKey})
	}
	return distinctIDs, groups
}

// GroupRef names a group by type name.
type GroupRef struct {
	Type, Key string
}

// Apply applies one event to the view.
func (v *View) Apply(e Event) {
	props := decode(e.Properties)
	p := v.person(e.DistinctID)
	switch e.Name {
	case "$identify":
		if anon := bloomkeys.IDString(props["$anon_distinct_id"]); anon != "" && anon != e.DistinctID {
			p = v.merge(p, anon)
		}
		if !p.Identified {
			p.Identified, p.Dirty = true, true
		}
	case "$create_alias", "$merge_dangerously":
		if alias := bloomkeys.IDString(props["alias"]); alias != "" && alias != e.DistinctID {
			p = v.merge(p, alias)
		}
	case "$groupidentify":
		v.identifyGroup(props)
	}
	p.applySet(props)
}

// person returns the person behind a distinct id, creating it when unknown.
func (v *View) person(distinctID string) *Person {
	p := v.ByDistinctID[distinctID]
	for p != nil && p.MergedInto != nil {
		p = p.MergedInto
	}
	if p == nil {
		p = &Person{Properties: map[string]any{}, DistinctIDs: []string{distinctID}, Dirty: true}
		v.ByDistinctID[distinctID] = p
	}
	return p
}

// merge joins the person behind otherID to keep. The merged person has keep's properties
// over the other's; when keep is new and the other stored, the stored row carries on (same
// result, fewer writes). It returns the surviving person.
func (v *View) merge(keep *Person, otherID string) *Person {
	other := v.ByDistinctID[otherID]
	for other != nil && other.MergedInto != nil {
		other = other.MergedInto
	}
	if other == nil {
		keep.DistinctIDs = append(keep.DistinctIDs, otherID)
		v.ByDistinctID[otherID] = keep
		keep.Dirty = true
		return keep
	}
	if other == keep {
		return keep
	}
	survivor, gone := keep, other
	if keep.ID == 0 && other.ID != 0 {
		survivor, gone = other, keep
	}
	props := make(map[string]any, len(other.Properties)+len(keep.Properties))
	for k, val := range other.Properties {
		props[k] = val
	}
	for k, val := range keep.Properties {
		props[k] = val
	}
	survivor.Properties = props
	survivor.Identified = keep.Identified || other.Identified
	survivor.Dirty = true
	survivor.DistinctIDs = append(survivor.DistinctIDs, gone.DistinctIDs...)
	for _, id := range gone.DistinctIDs {
		v.ByDistinctID[id] = survivor
	}
	gone.MergedInto = survivor
	v.Merged = append(v.Merged, gone)
	return survivor
}

// applySet applies $set, $set_once and $unset.
func (p *Person) applySet(props map[string]any) {
	if setOnce, ok := props["$set_once"].(map[string]any); ok {
		for k, val := range setOnce {
			if _, exists := p.Properties[k]; !exists {
				p.Properties[k] = val
				p.Dirty = true
			}
		}
	}
	if set, ok := props["$set"].(map[string]any); ok {
		for k, val := range set {
			p.Properties[k] = val
			p.Dirty = true
		}
	}
	if unset, ok := props["$unset"].([]any); ok {
		for _, k := range unset {
			if key := bloomkeys.IDString(k); key != "" {
				if _, exists := p.Properties[key]; exists {
					delete(p.Properties, key)
					p.Dirty = true
				}
			}
		}
	}
}

// identifyGroup creates or updates a group from a $groupidentify event. A new group type
// gets the next free index; a sixth type is ignored and counted.
func (v *View) identifyGroup(props map[string]any) {
	typ, key := bloomkeys.IDString(props["$group_type"]), bloomkeys.IDString(props["$group_key"])
	if typ == "" || key == "" {
		return
	}
	index, ok := v.GroupTypes[typ]
	if !ok {
		if len(v.GroupTypes) >= MaxGroupTypes {
			v.Ignored++
			return
		}
		index = len(v.GroupTypes)
		v.GroupTypes[typ] = index
		v.NewGroupTypes = append(v.NewGroupTypes, typ)
	}
	gk := GroupKey{TypeIndex: index, Key: key}
	g := v.Groups[gk]
	if g == nil {
		g = &Group{Properties: map[string]any{}}
		v.Groups[gk] = g
	}
	if set, ok := props["$group_set"].(map[string]any); ok {
		for k, val := range set {
			g.Properties[k] = val
		}
	}
	g.Dirty = true
}

func decode(raw json.RawMessage) map[string]any {
	var m map[string]any
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &m) // the edge checked the properties are an object
	}
	return m
}
