package flags

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// FlagDefinition is one flag as the engine takes it.
type FlagDefinition struct {
	ID                         int64
	Key                        string
	Name                       string
	Active                     bool
	Version                    int
	EnsureExperienceContinuity bool
	Filters                    json.RawMessage
}

// CohortDefinition is a cohort: static (a list of persons, known to the caller) or defined by
// a property group over person properties.
type CohortDefinition struct {
	ID     int64
	Static bool
	// Filters is {"properties": <property group>} for a property cohort.
	Filters json.RawMessage
}

// Project is everything a snapshot is compiled from.
type Project struct {
	Flags   []FlagDefinition
	Cohorts []CohortDefinition
	// GroupTypes maps a group type index (0–4) to its name.
	GroupTypes map[int]string
}

// CompileError reports the flags (or cohorts) whose definitions could not be compiled.
type CompileError struct {
	Problems []string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("%d invalid definition(s): %v", len(e.Problems), e.Problems)
}

// Snapshot is a project's compiled, immutable flag set. It is safe for concurrent use.
type Snapshot struct {
	flags      []compiledFlag // in output order: by key
	evalOrder  []int          // dependencies before dependents
	byKey      map[string]int
	groupTypes [maxGroupTypes]string

	personKeys    []string
	groupKeys     [maxGroupTypes][]string
	staticCohorts bool
}

const maxGroupTypes = 5

type compiledFlag struct {
	def         FlagDefinition
	groupIndex  int // -1 for person flags
	conditions  []condition
	super       []condition
	holdout     []condition
	variants    []variantRange
	payloadTrue json.RawMessage
	payloads    []json.RawMessage // by variant index
	deps        []int
}

type condition struct {
	matchers   []*matcher
	rollout    float64
	hasRollout bool
	variant    int    // index of the override variant, -1 for none
	rawVariant string // the override as written (holdouts name variants of their own)
}

type variantRange struct {
	key          string
	lower, upper float64
}

// Compile parses and compiles a project's flags and cohorts. Definitions that cannot be
// compiled are reported together in a *CompileError.
func Compile(p Project) (*Snapshot, error) {
	s := &Snapshot{byKey: make(map[string]int, len(p.Flags))}
	for i, name := range p.GroupTypes {
		if i >= 0 && i < maxGroupTypes {
			s.groupTypes[i] = name
		}
	}
	defs := make([]FlagDefinition, len(p.Flags))
	copy(defs, p.Flags)
	sort.SliceStable(defs, func(i, j int) bool { return defs[i].Key < defs[j].Key })
	byID := make(map[string]int, len(defs))
	for i, d := range defs {
		s.byKey[d.Key] = i
		byID[strconv.FormatInt(d.ID, 10)] = i
	}
	c := &compiler{snap: s, byKey: s.byKey, byID: byID, cohortDefs: map[int64]*CohortDefinition{},
		cohorts: map[int64]*cohort{}, personKeys: map[string]bool{}}
	for i := range p.Cohorts {
		c.cohortDefs[p.Cohorts[i].ID] = &p.Cohorts[i]
	}
	var problems []string
	s.flags = make([]compiledFlag, len(defs))
	for i, d := range defs {
		if err := c.compileFlag(&s.flags[i], d); err != nil {
			problems = append(problems, fmt.Sprintf("flag %q: %v", d.Key, err))
		}
	}
	if len(problems) > 0 {
		return nil, &CompileError{Problems: problems}
	}
	s.evalOrder = evaluationOrder(s.flags)
	for k := range c.personKeys {
		s.personKeys = append(s.personKeys, k)
	}
	sort.Strings(s.personKeys)
	for i := range s.groupKeys {
		sort.Strings(s.groupKeys[i])
	}
	return s, nil
}

type compiler struct {
	snap       *Snapshot
	byKey      map[string]int
	byID       map[string]int
	cohortDefs map[int64]*CohortDefinition
	cohorts    map[int64]*cohort
	personKeys map[string]bool
	groupSeen  [maxGroupTypes]map[string]bool
	flagIndex  int
}

func (c *compiler) compileFlag(cf *compiledFlag, d FlagDefinition) error {
	c.flagIndex = c.byKey[d.Key]
	cf.def = d
	raw := d.Filters
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	f, err := ParseFilters(raw)
	if err != nil {
		return err
	}
	cf.groupIndex = -1
	if f.AggregationGroupTypeIndex != nil {
		cf.groupIndex = *f.AggregationGroupTypeIndex
	}
	variantIndex := map[string]int{}
	if f.Multivariate != nil {
		lower := 0.0
		for i, v := range f.Multivariate.Variants {
			upper := lower + v.RolloutPercentage/100
			cf.variants = append(cf.variants, variantRange{key: v.Key, lower: lower, upper: upper})
			variantIndex[v.Key] = i
			lower = upper
		}
	}
	cf.payloads = make([]json.RawMessage, len(cf.variants))
	for k, payload := range f.Payloads {
		if isJSONNull(payload) {
			continue
		}
		compact := compactJSON(payload)
		if i, ok := variantIndex[k]; ok {
			cf.payloads[i] = compact
		} else if k == "true" {
			cf.payloadTrue = compact
		}
	}
	for _, set := range []struct {
		dst *[]condition
		src []Condition
	}{{&cf.conditions, f.Groups}, {&cf.super, f.SuperGroups}, {&cf.holdout, f.HoldoutGroups}} {
		for _, cond := range set.src {
			cc, err := c.compileCondition(cond, cf, variantIndex)
			if err != nil {
				return err
			}
			*set.dst = append(*set.dst, cc)
		}
	}
	return nil
}

func (c *compiler) compileCondition(cond Condition, cf *compiledFlag, variants map[string]int) (condition, error) {
	out := condition{variant: -1}
	if cond.RolloutPercentage != nil {
		out.rollout, out.hasRollout = *cond.RolloutPercentage, true
	}
	if cond.Variant != nil {
		out.rawVariant = *cond.Variant
		if i, ok := variants[*cond.Variant]; ok {
			out.variant = i
		}
	}
	for _, p := range cond.Properties {
		m, err := c.compileProperty(p, cf.groupIndex)
		if err != nil {
			return out, err
		}
		if m.source == sourceFlag && m.flagIndex >= 0 {
			cf.deps = append(cf.deps, m.flagIndex)
		}
		out.matchers = append(out.matchers, m)
	}
	return out, nil
}

// compileProperty compiles one filter and records which properties it reads.
func (c *compiler) compileProperty(p Property, groupIndex int) (*matcher, error) {
	m, err := newMatcher(p)
	if err != nil {
		return nil, err
	}
	switch m.source {
	case sourcePerson:
		c.personKeys[m.key] = true
	case sourceGroup:
		gi := groupIndex
		if p.GroupTypeIndex != nil {
			gi = *p.GroupTypeIndex
		}
		if gi < 0 || gi >= maxGroupTypes {
			return nil, errors.New("group property without a valid group_type_index")
		}
		m.groupIndex = gi
		if c.groupSeen[gi] == nil {
			c.groupSeen[gi] = map[string]bool{}
		}
		if !c.groupSeen[gi][m.key] {
			c.groupSeen[gi][m.key] = true
			c.snap.groupKeys[gi] = append(c.snap.groupKeys[gi], m.key)
		}
	case sourceCohort:
		id, _ := cohortID(p.Value)
		m.cohort = c.cohort(id, map[int64]bool{})
	case sourceFlag:
		m.flagIndex = -1
		if i, ok := c.byKey[p.Key]; ok {
			m.flagIndex = i
		} else if i, ok := c.byID[p.Key]; ok {
			m.flagIndex = i
		}
		if m.flagIndex == c.flagIndex {
			m.flagIndex = -1 // a flag that depends on itself never matches
		}
	}
	return m, nil
}

// cohort compiles the cohort with the given id once. An unknown cohort, or one that is part
// of a reference cycle, matches nobody.
func (c *compiler) cohort(id int64, visiting map[int64]bool) *cohort {
	if co, ok := c.cohorts[id]; ok {
		return co
	}
	def, ok := c.cohortDefs[id]
	if !ok || visiting[id] {
		return &cohort{id: id, unknown: true}
	}
	visiting[id] = true
	defer delete(visiting, id)
	co := &cohort{id: id, static: def.Static}
	if def.Static {
		c.snap.staticCohorts = true
	} else {
		var body struct {
			Properties *PropertyGroup `json:"properties"`
		}
		if err := json.Unmarshal(def.Filters, &body); err != nil || body.Properties == nil {
			co.unknown = true
		} else if g, err := c.compileGroup(body.Properties, visiting); err != nil {
			co.unknown = true
		} else {
			co.group = g
		}
	}
	c.cohorts[id] = co
	return co
}

func (c *compiler) compileGroup(g *PropertyGroup, visiting map[int64]bool) (*propertyGroup, error) {
	out := &propertyGroup{and: g.Type != "OR"}
	for _, v := range g.Values {
		switch {
		case v.Group != nil:
			sub, err := c.compileGroup(v.Group, visiting)
			if err != nil {
				return nil, err
			}
			out.items = append(out.items, groupItem{group: sub})
		case v.Property != nil:
			p := *v.Property
			if p.Type == TypeGroup || p.Type == TypeFlag {
				return nil, fmt.Errorf("cohorts may not use %s properties", p.Type)
			}
			m, err := newMatcher(p)
			if err != nil {
				return nil, err
			}
			switch m.source {
			case sourcePerson:
				c.personKeys[m.key] = true
			case sourceCohort:
				id, _ := cohortID(p.Value)
				m.cohort = c.cohort(id, visiting)
			}
			out.items = append(out.items, groupItem{matcher: m})
		}
	}
	return out, nil
}

// evaluationOrder orders flags so that every flag comes after the flags it depends on.
// Flags in a dependency cycle keep their place; their references to each other never match.
func evaluationOrder(flags []compiledFlag) []int {
	const (
		unvisited = iota
		active
		done
	)
	state := make([]int, len(flags))
	order := make([]int, 0, len(flags))
	var visit func(i int)
	visit = func(i int) {
		state[i] = active
		for _, d := range flags[i].deps {
			switch state[d] {
			case unvisited:
				visit(d)
			case active: // a cycle: cut every reference from i to d
				cutDependency(&flags[i], d)
			}
		}
		state[i] = done
		order = append(order, i)
	}
	for i := range flags {
		if state[i] == unvisited {
			visit(i)
		}
	}
	return order
}

func cutDependency(f *compiledFlag, dep int) {
	for _, set := range [][]condition{f.conditions, f.super, f.holdout} {
		for _, cond := range set {
			for _, m := range cond.matchers {
				if m.source == sourceFlag && m.flagIndex == dep {
					m.flagIndex = -1
				}
			}
		}
	}
}

func isJSONNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func compactJSON(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// PropertyGroup is a nested AND/OR group of property filters, as cohorts define them.
type PropertyGroup struct {
	Type   string               `json:"type"`
	Values []PropertyGroupValue `json:"values"`
}

// PropertyGroupValue is either a nested group or a property filter.
type PropertyGroupValue struct {
	Group    *PropertyGroup
	Property *Property
}

// UnmarshalJSON reads a value with "values" as a group and anything else as a property.
func (v *PropertyGroupValue) UnmarshalJSON(data []byte) error {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if _, ok := probe["values"]; ok {
		v.Group = new(PropertyGroup)
		return dec.Decode(v.Group)
	}
	v.Property = new(Property)
	return dec.Decode(v.Property)
}

// Len returns the number of flags in the snapshot.
func (s *Snapshot) Len() int { return len(s.flags) }

// Lookup returns the index of the flag with the given key in results, or -1.
func (s *Snapshot) Lookup(key string) int {
	if i, ok := s.byKey[key]; ok {
		return i
	}
	return -1
}

// PersonPropertyKeys lists the person properties any flag or cohort reads, sorted.
func (s *Snapshot) PersonPropertyKeys() []string { return s.personKeys }

// GroupPropertyKeys lists the properties of group type index gi that flags read, sorted.
func (s *Snapshot) GroupPropertyKeys(gi int) []string {
	if gi < 0 || gi >= maxGroupTypes {
		return nil
	}
	return s.groupKeys[gi]
}

// UsesStaticCohorts reports whether any flag depends on membership in a static cohort.
func (s *Snapshot) UsesStaticCohorts() bool { return s.staticCohorts }

// GroupTypeName returns the name of group type index gi, or "".
func (s *Snapshot) GroupTypeName(gi int) string {
	if gi < 0 || gi >= maxGroupTypes {
		return ""
	}
	return s.groupTypes[gi]
}

// NeedsPersonLookup reports whether evaluation may need stored person properties: some
// property that flags read is in none of the given layers, or flags use static cohorts.
func (s *Snapshot) NeedsPersonLookup(overrides, geoip Properties) bool {
	if s.staticCohorts {
		return true
	}
	for _, k := range s.personKeys {
		if k == "distinct_id" {
			continue
		}
		if v, ok := overrides[k]; ok && v != nil {
			continue
		}
		if v, ok := geoip[k]; ok && v != nil {
			continue
		}
		return true
	}
	return false
}

// NeedsGroupLookup reports whether evaluation may need stored properties of group type gi:
// some property that flags read is not in overrides.
func (s *Snapshot) NeedsGroupLookup(gi int, overrides Properties) bool {
	for _, k := range s.GroupPropertyKeys(gi) {
		if k == "$group_key" {
			continue
		}
		if v, ok := overrides[k]; !ok || v == nil {
			return true
		}
	}
	return false
}
