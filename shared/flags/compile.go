package flags

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	// EvaluationRuntime is "all" (or empty), "client" or "server"; EvaluationTags are the
	// flag's evaluation tags. Together they say which requests get the flag (Selected).
	EvaluationRuntime string
	EvaluationTags    []string
	// BucketingIdentifier is PostHog's flag-level bucketing_identifier: "device_id" buckets
	// person conditions on the device id (as filters.bucketing_identifier does, which it
	// overrides when set), "distinct_id" or empty on the distinct id.
	BucketingIdentifier string
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
//
// An edge holds a snapshot of every project it serves, so its size is the edge's memory:
// the structures below hold only what evaluation reads, and what the SDK definitions need
// besides (the filters as compact JSON) is interned, shared with every snapshot holding the
// same text.
type Snapshot struct {
	flags      []compiledFlag // in output order: by key
	evalOrder  []int          // dependencies before dependents; nil when that is the output order
	groupTypes [maxGroupTypes]string

	// payloaded lists, by index, the flags with a payload for some value (Payloaded).
	payloaded []int

	personKeys    []string
	groupKeys     [maxGroupTypes][]string
	staticCohorts bool
	timeLimited   bool // see TimeLimited
	// runtimeScoped is set when a flag is for one runtime only, tagged when a flag has
	// evaluation tags (see Filters).
	runtimeScoped, tagged bool

	// What Source returns besides the flags.
	cohortSources []cohortSource
	groupTypeMap  map[int]string
}

const maxGroupTypes = 5

type compiledFlag struct {
	key        string
	conditions []condition
	id         int64
	version    int
	values     *flagValues     // nil for a boolean flag without a payload
	rare       *rareConditions // nil for the many flags without super conditions or holdouts
	filters    interned        // the definition's filters as compact JSON, for Source
	name       interned        // for Source
	groupIndex int8            // -1 for person flags
	active     bool
	continuity bool // ensure_experience_continuity
	// perCondition is set when conditions differ in what they bucket on (another
	// aggregation than the flag's, or device ids): the subject is then chosen per condition.
	perCondition bool
	earlyExit    bool
	// missingDependency is set when the flag depends on a flag that does not exist, on
	// itself, on a cycle, or on a flag with a missing dependency: it is then false.
	missingDependency bool
	runtime           Runtime  // RuntimeAll, RuntimeClient or RuntimeServer
	bucketing         string   // the flag-level bucketing_identifier, for Source
	evaluationTags    []string // nil when the flag has none
	// hashed is set when the flag's rollout hash may be needed and has the distinct id as
	// its subject (markHashed); hashPartner is then the next such flag in evaluation order,
	// hashed with it, or -1.
	hashed      bool
	hashPartner int32
	// keyBlock is the key and "." as the start of its hash inputs' block (see tail), nil when
	// the key is too long to leave room for a subject.
	keyBlock *block
}

// flagValues are what an enabled flag can be besides a plain true: its variants, and the
// payloads of its values.
type flagValues struct {
	variants    []variant
	payloadTrue json.RawMessage
	// split is set when the variant depends on the hash: some variant has a share and it is
	// not all of it.
	split bool
}

// rareConditions are the kinds of condition few flags have.
type rareConditions struct {
	super   []condition
	holdout []holdout
}

type condition struct {
	matchers []matcherRef
	// rollout is the largest hash value in the rollout: maxHash without a rollout or at
	// 100%, which need no hash.
	rollout int64
	variant int // index of the override variant, -1 for none
	// groupIndex is the group type the condition aggregates by, -1 for persons.
	groupIndex int8
	device     bool // a person condition bucketed on the device id
}

// holdout is a holdout condition: it names a variant of its own (e.g. "holdout-7").
type holdout struct {
	condition
	variantKey string
}

type variant struct {
	key         string
	above, upTo int64 // the hash values of the variant: above < x <= upTo
	payload     json.RawMessage
}

type cohortSource struct {
	id      int64
	static  bool
	filters interned
}

// Compile parses and compiles a project's flags and cohorts. Definitions that cannot be
// compiled are reported together in a *CompileError.
func Compile(p Project) (*Snapshot, error) {
	s := &Snapshot{groupTypeMap: make(map[int]string, len(p.GroupTypes))}
	for i, name := range p.GroupTypes {
		s.groupTypeMap[i] = name
		if i >= 0 && i < maxGroupTypes {
			s.groupTypes[i] = name
		}
	}
	defs := make([]FlagDefinition, len(p.Flags))
	copy(defs, p.Flags)
	sort.SliceStable(defs, func(i, j int) bool { return defs[i].Key < defs[j].Key })
	byKey := make(map[string]int, len(defs))
	byID := make(map[string]int, len(defs))
	for i, d := range defs {
		byKey[d.Key] = i
		byID[strconv.FormatInt(d.ID, 10)] = i
	}
	c := &compiler{snap: s, byKey: byKey, byID: byID, cohortDefs: map[int64]*CohortDefinition{},
		cohorts: map[int64]*cohort{}, personKeys: map[string]bool{}, matchers: map[string]*matcher{},
		deps: make([][]int, len(defs))}
	for i := range p.Cohorts {
		cd := &p.Cohorts[i]
		c.cohortDefs[cd.ID] = cd
		s.cohortSources = append(s.cohortSources, cohortSource{id: cd.ID, static: cd.Static, filters: internJSON(cd.Filters)})
	}
	var problems []string
	s.flags = make([]compiledFlag, len(defs))
	for i, d := range defs {
		c.index = i
		if err := c.compileFlag(&s.flags[i], d); err != nil {
			problems = append(problems, fmt.Sprintf("flag %q: %v", d.Key, err))
		}
	}
	if len(problems) > 0 {
		return nil, &CompileError{Problems: problems}
	}
	s.evalOrder = evaluationOrder(s.flags, c.deps)
	markMissingDependencies(s.flags, s.evalOrder, c.deps)
	for k := range c.personKeys {
		s.personKeys = append(s.personKeys, k)
	}
	sort.Strings(s.personKeys)
	for _, m := range c.matchers {
		s.timeLimited = s.timeLimited || m.timeLimited()
		if i, ok := slices.BinarySearch(s.personKeys, m.key); ok && m.source == sourcePerson && i < maxPersonSlots {
			m.personSlot = uint8(i + 1)
		}
	}
	for i := range s.groupKeys {
		sort.Strings(s.groupKeys[i])
	}
	s.assignMemoSlots()
	s.markHashed()
	for i := range s.flags {
		s.flags[i].keyBlock = newKeyBlock(s.flags[i].key)
	}
	for i := range s.flags {
		if s.flags[i].hasPayload() {
			s.payloaded = append(s.payloaded, i)
		}
	}
	return s, nil
}

// markHashed marks the flags whose rollout hash an evaluation may compute with the distinct
// id as its subject: active person flags without per-condition subjects, experience
// continuity, super conditions or holdouts, with a condition whose rollout is below 100%;
// multivariate flags only when their first condition has no properties (the others' rollout
// and variant are hashed together). Each is given the next of them in evaluation order as
// its partner: the evaluation that first needs one's hash computes its partner's with it
// (sha1block hashes two blocks in about 1.3 times the time of one), ready when the
// partner's turn comes, so that a project of many rollouts pays about half a block's
// compression per flag instead of one.
func (s *Snapshot) markHashed() {
	order := s.evalOrder
	if order == nil {
		order = make([]int, len(s.flags))
		for i := range order {
			order[i] = i
		}
	}
	prev := -1
	for _, i := range order {
		f := &s.flags[i]
		f.hashPartner = -1
		switch {
		case !f.active || f.missingDependency || f.groupIndex >= 0 || f.perCondition || f.continuity || f.rare != nil || len(f.conditions) == 0:
			continue
		case len(f.conditions[0].matchers) == 0 && f.conditions[0].rollout < maxHash:
		case f.hasRollout() && (f.values == nil || len(f.values.variants) == 0):
		default:
			continue
		}
		f.hashed = true
		if prev >= 0 {
			s.flags[prev].hashPartner = int32(i)
		}
		prev = i
	}
}

// hasPayload reports whether some value of f has a payload.
func (f *compiledFlag) hasPayload() bool {
	if f.values == nil {
		return false
	}
	if f.values.payloadTrue != nil {
		return true
	}
	for i := range f.values.variants {
		if f.values.variants[i].payload != nil {
			return true
		}
	}
	return false
}

// hasRollout reports whether a condition of f has a rollout below 100%.
func (f *compiledFlag) hasRollout() bool {
	for i := range f.conditions {
		if f.conditions[i].rollout < maxHash {
			return true
		}
	}
	return false
}

type compiler struct {
	snap       *Snapshot
	byKey      map[string]int
	byID       map[string]int
	cohortDefs map[int64]*CohortDefinition
	cohorts    map[int64]*cohort
	personKeys map[string]bool
	groupSeen  [maxGroupTypes]map[string]bool
	flagIndex  int // the index the compiled flag's key names (the last of equal keys)
	index      int // the compiled flag's own index
	// matchers holds the snapshot's person and group property matchers by filter, so that
	// flags with the same filter share one matcher (and one memo slot in an evaluation).
	matchers map[string]*matcher
	deps     [][]int // by flag index: the flags it depends on
}

func (c *compiler) compileFlag(cf *compiledFlag, d FlagDefinition) error {
	c.flagIndex = c.byKey[d.Key]
	cf.key, cf.id, cf.version, cf.active, cf.continuity = d.Key, d.ID, d.Version, d.Active, d.EnsureExperienceContinuity
	cf.filters, cf.name = internJSON(d.Filters), internString(d.Name)
	cf.runtime = ParseRuntime(d.EvaluationRuntime)
	if len(d.EvaluationTags) > 0 {
		cf.evaluationTags = append([]string(nil), d.EvaluationTags...)
	}
	c.snap.runtimeScoped = c.snap.runtimeScoped || cf.runtime != RuntimeAll
	c.snap.tagged = c.snap.tagged || len(cf.evaluationTags) > 0
	raw := d.Filters
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	f, err := decodeFilters(raw)
	if err != nil {
		return err
	}
	if cf.bucketing = d.BucketingIdentifier; cf.bucketing != "" {
		f.BucketingIdentifier = cf.bucketing
	}
	cf.earlyExit = f.EarlyExit
	cf.groupIndex = -1
	if f.AggregationGroupTypeIndex != nil {
		cf.groupIndex = int8(*f.AggregationGroupTypeIndex) // 0–4: Validate checked
	}
	variantIndex := map[string]int{}
	if f.Multivariate != nil && len(f.Multivariate.Variants) > 0 {
		cf.values = &flagValues{variants: make([]variant, 0, len(f.Multivariate.Variants))}
		lower := 0.0
		for i, v := range f.Multivariate.Variants {
			upper := lower + v.RolloutPercentage/100
			cf.values.variants = append(cf.values.variants, variant{key: v.Key, above: lastBelow(lower), upTo: lastBelow(upper)})
			variantIndex[v.Key] = i
			lower = upper
		}
		for _, v := range f.Multivariate.Variants {
			if v.RolloutPercentage > 0 {
				cf.values.split = v.RolloutPercentage < 100
				break
			}
		}
	}
	for k, payload := range f.Payloads {
		if isJSONNull(payload) {
			continue
		}
		compact := compactJSON(payload)
		if i, ok := variantIndex[k]; ok {
			cf.values.variants[i].payload = compact
		} else if k == "true" {
			if cf.values == nil {
				cf.values = &flagValues{}
			}
			cf.values.payloadTrue = compact
		}
	}
	compile := func(src []Condition) ([]condition, error) {
		if len(src) == 0 {
			return nil, nil
		}
		out := make([]condition, len(src))
		for i, cond := range src {
			if out[i], err = c.compileCondition(cond, f, cf, variantIndex); err != nil {
				return nil, err
			}
			if int(out[i].groupIndex) != int(cf.groupIndex) || out[i].device {
				cf.perCondition = true
			}
		}
		return out, nil
	}
	if cf.conditions, err = compile(f.Groups); err != nil {
		return err
	}
	if len(f.SuperGroups) == 0 && len(f.HoldoutGroups) == 0 {
		return nil
	}
	cf.rare = &rareConditions{}
	if cf.rare.super, err = compile(f.SuperGroups); err != nil {
		return err
	}
	holdouts, err := compile(f.HoldoutGroups)
	if err != nil {
		return err
	}
	for i, h := range holdouts {
		key := ""
		if v := f.HoldoutGroups[i].Variant; v != nil {
			key = *v
		}
		cf.rare.holdout = append(cf.rare.holdout, holdout{condition: h, variantKey: key})
	}
	return nil
}

func (c *compiler) compileCondition(cond Condition, f *Filters, cf *compiledFlag, variants map[string]int) (condition, error) {
	gi := cond.groupIndex(f.AggregationGroupTypeIndex)
	if gi >= maxGroupTypes {
		return condition{}, errors.New("aggregation_group_type_index must be between 0 and 4")
	}
	out := condition{rollout: maxHash, variant: -1, groupIndex: int8(gi)}
	bucketing := f.BucketingIdentifier
	if cond.BucketingIdentifier != "" {
		bucketing = cond.BucketingIdentifier
	}
	out.device = gi < 0 && bucketing == "device_id"
	if cond.RolloutPercentage != nil {
		out.rollout = lastAtMost(*cond.RolloutPercentage / 100)
	}
	if cond.Variant != nil {
		if i, ok := variants[*cond.Variant]; ok {
			out.variant = i
		}
	}
	if len(cond.Properties) > 0 {
		out.matchers = make([]matcherRef, 0, len(cond.Properties))
	}
	for _, p := range cond.Properties {
		m, err := c.compileProperty(p, gi)
		if err != nil {
			return out, err
		}
		if m.source == sourceFlag && m.flagIndex >= 0 {
			c.deps[c.index] = append(c.deps[c.index], m.flagIndex)
		}
		out.matchers = append(out.matchers, matcherRef{matcher: m, slot: noSlot})
	}
	return out, nil
}

// compileProperty compiles one filter and records which properties it reads.
func (c *compiler) compileProperty(p Property, groupIndex int) (*matcher, error) {
	gi := -1
	if p.Type == TypeGroup {
		gi = groupIndex
		if p.GroupTypeIndex != nil {
			gi = *p.GroupTypeIndex
		}
		if gi < 0 || gi >= maxGroupTypes {
			return nil, errors.New("group property without a valid group_type_index")
		}
	}
	m, err := c.propertyMatcher(p, gi)
	if err != nil {
		return nil, err
	}
	switch m.source {
	case sourcePerson:
		c.personKeys[m.key] = true
	case sourceGroup:
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
		// PostHog's server never reads a flag filter's negation in a flag's condition
		// (rust/feature-flags/src/flags/flag_matching_utils.rs, match_flag_value_to_flag_filter).
		m.negation = false
	}
	return m, nil
}

// propertyMatcher compiles a filter; person and group filters equal to one compiled before
// get that matcher. Cohort and flag filters always get their own: cycles are cut per flag.
func (c *compiler) propertyMatcher(p Property, groupIndex int) (*matcher, error) {
	typ := p.Type
	if typ == "" {
		typ = TypePerson
	}
	if typ != TypePerson && typ != TypeGroup {
		return newMatcher(p)
	}
	key, err := json.Marshal(struct {
		Type, Operator, Key string
		Negation            bool
		Group               int
		Value               any
	}{typ, defaultOperator(typ, p.Operator), p.Key, p.Negation, groupIndex, p.Value})
	if err != nil { // not in c.matchers: TimeLimited is told here
		m, err := newMatcher(p)
		if err == nil {
			c.snap.timeLimited = c.snap.timeLimited || m.timeLimited()
		}
		return m, err
	}
	if m, ok := c.matchers[string(key)]; ok {
		return m, nil
	}
	m, err := newMatcher(p)
	if err != nil {
		return nil, err
	}
	m.groupIndex = groupIndex
	c.matchers[string(key)] = m
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
			if p.Type == TypeGroup {
				return nil, fmt.Errorf("cohorts may not use %s properties", p.Type)
			}
			if p.Type == TypeFlag {
				// PostHog's server matches a cohort's filters with match_property, which
				// errs on flag_evaluates_to: the filter is no match, negation applied
				// (rust/feature-flags/src/cohorts/cohort_operations.rs:
				// evaluate_property_with_negation).
				m, err := newMatcher(p)
				if err != nil {
					return nil, err
				}
				m.flagIndex, m.valid = -1, false
				out.items = append(out.items, groupItem{matcher: matcherRef{matcher: m, slot: noSlot}})
				continue
			}
			m, err := c.propertyMatcher(p, -1)
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
			out.items = append(out.items, groupItem{matcher: matcherRef{matcher: m, slot: noSlot}})
		}
	}
	return out, nil
}

// evaluationOrder orders flags so that every flag comes after the flags it depends on; nil
// when the output order already is such an order. Flags in a dependency cycle keep their
// place; their references to each other never match.
func evaluationOrder(flags []compiledFlag, deps [][]int) []int {
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
		for _, d := range deps[i] {
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
	for i, f := range order {
		if i != f {
			return order
		}
	}
	return nil
}

// markMissingDependencies marks the flags with a flag filter that can never be evaluated (its
// flag is unknown, the flag itself, or a cycle cut it; a filter naming no flag is only a
// condition that never matches, as on PostHog's server) and, dependencies first, the flags that
// depend on a marked one.
func markMissingDependencies(flags []compiledFlag, order []int, deps [][]int) {
	visit := func(i int) {
		f := &flags[i]
		f.forEachCondition(func(c *condition) {
			for _, m := range c.matchers {
				if m.source == sourceFlag && m.flagIndex < 0 && m.valid {
					f.missingDependency = true
				}
			}
		})
		for _, d := range deps[i] {
			if flags[d].missingDependency {
				f.missingDependency = true
			}
		}
	}
	if order == nil {
		for i := range flags {
			visit(i)
		}
		return
	}
	for _, i := range order {
		visit(i)
	}
}

func cutDependency(f *compiledFlag, dep int) {
	f.forEachCondition(func(c *condition) {
		for _, m := range c.matchers {
			if m.source == sourceFlag && m.flagIndex == dep {
				m.flagIndex = -1
			}
		}
	})
}

func isJSONNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// compactJSON returns raw without insignificant space, in a slice of its own length; raw
// itself when it is not valid JSON.
func compactJSON(raw json.RawMessage) json.RawMessage {
	buf := bytes.NewBuffer(make([]byte, 0, len(raw)))
	if err := json.Compact(buf, raw); err != nil {
		return raw
	}
	if buf.Len() == len(raw) {
		return buf.Bytes()
	}
	return bytes.Clone(buf.Bytes())
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

// Key returns the key of the flag whose result Evaluate writes at index i.
func (s *Snapshot) Key(i int) string { return s.flags[i].key }

// Payloaded lists, in increasing order, the indices in results of the flags that have a
// payload for some value: only their results can carry one, so that an answer's payloads
// are found without a pass over every result. It is shared: callers must not change it.
func (s *Snapshot) Payloaded() []int { return s.payloaded }

// Lookup returns the index of the flag with the given key in results, or -1.
func (s *Snapshot) Lookup(key string) int {
	// Flags are sorted by key; of equal keys the last one is the one found.
	i := sort.Search(len(s.flags), func(i int) bool { return s.flags[i].key > key })
	if i > 0 && s.flags[i-1].key == key {
		return i - 1
	}
	return -1
}

// Source returns the definitions the snapshot was compiled from, for DefinitionsBody: the
// flags (sorted by key), the cohorts and the group types, filters as compact JSON. An edge
// keeps no other copy of them.
func (s *Snapshot) Source() Project {
	p := Project{Flags: make([]FlagDefinition, len(s.flags)), GroupTypes: maps.Clone(s.groupTypeMap)}
	for i := range s.flags {
		f := &s.flags[i]
		p.Flags[i] = FlagDefinition{ID: f.id, Key: f.key, Name: f.name.String(), Active: f.active, Version: f.version,
			EnsureExperienceContinuity: f.continuity, Filters: f.filters.rawMessage(),
			EvaluationRuntime: f.runtime.String(), EvaluationTags: f.evaluationTags, BucketingIdentifier: f.bucketing}
	}
	for _, c := range s.cohortSources {
		p.Cohorts = append(p.Cohorts, CohortDefinition{ID: c.id, Static: c.static, Filters: c.filters.rawMessage()})
	}
	return p
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
		if _, ok := overrides[k]; ok {
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
		if _, ok := overrides[k]; !ok {
			return true
		}
	}
	return false
}
