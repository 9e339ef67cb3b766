package flags

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Request is what one evaluation knows about the user and its groups. Property layers are
// consulted from the most specific: request overrides, then GeoIP, then stored properties.
type Request struct {
	DistinctID string
	// Groups maps a group type name to the group key.
	Groups map[string]string

	PersonProperties Properties // overrides sent with the request
	GeoIP            Properties // $geoip_* properties derived from the client IP
	StoredPerson     Properties // properties stored for the person
	// PersonLookupFailed means stored person properties were needed but could not be
	// fetched: a flag that reads a property none of the layers has is marked failed.
	PersonLookupFailed bool
	// StaticCohorts lists the static cohorts the person belongs to.
	StaticCohorts []int64

	GroupProperties map[string]Properties // overrides by group type name
	StoredGroups    map[string]Properties // stored properties by group type name
	// GroupLookupFailed has bit i set when stored properties of group type index i were
	// needed but could not be fetched.
	GroupLookupFailed uint8

	// HashKeyOverrides maps flag keys to the identifier to hash instead of the distinct_id,
	// for flags with experience continuity.
	HashKeyOverrides map[string]string
	// DeviceID is the request's $device_id, which conditions bucketed by device hash; when
	// it is empty, the person properties' $device_id is used.
	DeviceID string

	// Now is the time relative dates count back from; zero means time.Now().
	Now time.Time
	// Until, when set, is lowered by Evaluate to the earliest instant after Now at which a
	// date comparison it made could come out otherwise (a relative date moves with the
	// clock), and to Now itself when it cannot tell; it is left alone when none could. An
	// answer kept for later (edge/answercache) is good until then.
	Until *time.Time

	// Selective says that the answer gives only the flags Snapshot.Selected keeps for
	// Runtime and EvaluationContexts: a filter on a flag left out then never matches, as
	// PostHog's server, which evaluates only the flags it keeps, answers. Flags left out
	// for not being in flag_keys_to_evaluate are not meant: the server evaluates those a
	// requested flag depends on.
	Selective          bool
	Runtime            Runtime
	EvaluationContexts []string
}

// Reason says why a flag has its value.
type Reason uint8

// The reasons, in the API's codes.
const (
	ReasonNoConditionMatch Reason = iota
	ReasonOutOfRolloutBound
	ReasonNoGroupType
	ReasonConditionMatch
	ReasonSuperConditionValue
	ReasonHoldoutConditionValue
	ReasonDisabled
	ReasonError
	ReasonMissingDependency
)

var reasonCodes = [...]string{"no_condition_match", "out_of_rollout_bound", "no_group_type", "condition_match",
	"super_condition_value", "holdout_condition_value", "disabled", "error", "missing_dependency"}

// String returns the reason's API code.
func (r Reason) String() string { return reasonCodes[r] }

// Description returns the human-readable reason; index is the condition index or -1.
func (r Reason) Description(index int) string {
	switch r {
	case ReasonConditionMatch:
		return "Matched condition set " + strconv.Itoa(index+1)
	case ReasonNoConditionMatch:
		return "No matching condition set"
	case ReasonOutOfRolloutBound:
		return "Out of rollout bound"
	case ReasonNoGroupType:
		return "No group type"
	case ReasonSuperConditionValue:
		return "Super condition value"
	case ReasonHoldoutConditionValue:
		return "Holdout condition value"
	case ReasonDisabled:
		return "Feature flag is disabled"
	case ReasonMissingDependency:
		return "Flag cannot be evaluated due to missing dependency"
	}
	return "Error evaluating flag"
}

// Result is one flag's evaluation. (Its fields are ordered to keep it small: an evaluation
// writes one per flag.)
type Result struct {
	Key string
	// Variant is the variant key of an enabled multivariate flag, else "".
	Variant string
	// Payload is the payload of the value, as stored (compact JSON), or nil. It is shared
	// with the snapshot and every other result: it must not be changed.
	Payload json.RawMessage
	ID      int64
	Version int
	// ConditionIndex is the index of the deciding condition, or -1.
	ConditionIndex int
	// Active is false for inactive flags, which evaluate to false with ReasonDisabled.
	Active  bool
	Enabled bool
	Reason  Reason
	// Failed reports that the flag could not be computed: properties it needs could not be
	// fetched. It is then disabled with ReasonError.
	Failed bool
}

// Value returns the flag's value as the API shows it: false, true or the variant key.
func (r *Result) Value() any {
	switch {
	case !r.Enabled:
		return false
	case r.Variant != "":
		return r.Variant
	}
	return true
}

// Evaluate evaluates every flag of the snapshot for the request. Results are written into
// out (grown when too small) in the snapshot's order (by key) and returned; reusing out
// across calls makes evaluation free of allocations.
func (s *Snapshot) Evaluate(req *Request, out []Result) []Result {
	if cap(out) < len(s.flags) {
		out = make([]Result, len(s.flags))
	}
	out = out[:len(s.flags)]
	e := evaluation{snap: s, req: *req, results: out, now: req.Now}
	e.selective = req.Selective && s.Filters(req.Runtime, req.EvaluationContexts)
	if s.evalOrder == nil {
		for i := range s.flags {
			e.flag(&s.flags[i], &out[i])
		}
	} else {
		for _, i := range s.evalOrder {
			e.flag(&s.flags[i], &out[i])
		}
	}
	if e.hasher != nil {
		hashers.Put(e.hasher)
	}
	return out
}

// EvaluateFlag evaluates, for the request, the flag at index i (as Lookup numbers it) and the
// flags it depends on, dependencies first, and returns its result: the one Evaluate would
// write at index i. A caller that needs one flag's answer (the control plane deciding a
// release plan's eligibility, user by user) then pays for that flag and what its conditions
// read, not for every flag of the project. out is scratch, as in Evaluate; the results of
// flags not evaluated are left as they were.
func (s *Snapshot) EvaluateFlag(req *Request, i int, out []Result) (Result, []Result) {
	if cap(out) < len(s.flags) {
		out = make([]Result, len(s.flags))
	}
	out = out[:len(s.flags)]
	e := evaluation{snap: s, req: *req, results: out, now: req.Now}
	e.selective = req.Selective && s.Filters(req.Runtime, req.EvaluationContexts)
	for _, j := range s.dependencyOrder(i, nil) {
		e.flag(&s.flags[j], &out[j])
	}
	if e.hasher != nil {
		hashers.Put(e.hasher)
	}
	return out[i], out
}

// dependencyOrder appends to order flag i after the flags it depends on, each once, those
// first: compiling cut the cycles, so the references form a DAG. A flag has few
// dependencies, so a linear search of order stands in for a set.
func (s *Snapshot) dependencyOrder(i int, order []int) []int {
	if slices.Contains(order, i) {
		return order
	}
	s.flags[i].forEachCondition(func(c *condition) {
		for _, m := range c.matchers {
			if m.source == sourceFlag && m.flagIndex >= 0 {
				order = s.dependencyOrder(m.flagIndex, order)
			}
		}
	})
	return append(order, i)
}

// evaluation is the state of one Evaluate call.
type evaluation struct {
	snap *Snapshot
	// req is a copy: a pointer would make every caller's Request escape to the heap (escape
	// analysis cannot tell it from the evaluation's other pointers, which do).
	req     Request
	results []Result
	// selective is set when the request's answer leaves flags out (Request.Selective).
	selective bool
	now       time.Time
	// Set while evaluating one flag:
	current    *compiledFlag
	groupName  string
	groupKey   string
	failed     bool
	hashSubj   string
	groupIndex int
	// noSubject is set for a condition bucketed by a device id the request lacks: what
	// depends on the hash is withheld.
	noSubject bool
	// rolloutHash is the flag's rollout hash once computed (haveRollout): every condition
	// of a flag hashes the same input.
	rolloutHash int64
	haveRollout bool
	// variantHash is the flag's variant hash (haveVariant), computed with the rollout hash
	// when the flag has variants: both at once cost little more than one.
	variantHash uint64
	haveVariant bool
	blocks      [2]block // sha1block's inputs
	// tails are the hash subjects placed for block.join, without a salt and with "variant".
	tails [2]tail
	// pending is the flag whose rollout hash was computed with an earlier flag's, as its
	// hashPartner, and pendingHash that hash; nil when there is none.
	pending     *compiledFlag
	pendingHash uint64

	hasher *hasher // taken from hashers at the first hash
	memo   memo
	parsed parsedValues
	// person holds the person properties read so far, by matcher.personSlot-1: those known
	// have their bit set in personKnown, and those found in personFound.
	person                   [maxPersonSlots]any
	personKnown, personFound uint32
}

// maxPersonSlots is how many of a snapshot's person property keys an evaluation keeps the
// values of (evaluation.person).
const maxPersonSlots = 32

// parsedValues keeps the last property value read as a version and as a date, with what it
// read: flags often test one property (app_version, signup_date) with several operators.
type parsedValues struct {
	versionText string
	versionOf   semver
	versionOK   bool
	haveVersion bool

	dateText string
	dateOf   time.Time
	dateOK   bool
	haveDate bool
}

// version is parseSemver(s), read once for consecutive equal s.
func (p *parsedValues) version(s string) (semver, bool) {
	if !p.haveVersion || s != p.versionText {
		p.versionOf, p.versionOK = parseSemver(s)
		p.versionText, p.haveVersion = s, true
	}
	return p.versionOf, p.versionOK
}

// date is personDate(v), read once for consecutive equal strings.
func (p *parsedValues) date(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return personDate(v)
	}
	if !p.haveDate || s != p.dateText {
		p.dateOf, p.dateOK = personDate(s)
		p.dateText, p.haveDate = s, true
	}
	return p.dateOf, p.dateOK
}

// flag evaluates one flag into r, in place: a Result is too large to return by value for
// every flag.
func (e *evaluation) flag(f *compiledFlag, r *Result) {
	// Field by field: a composite literal would be built on the stack and then copied, with
	// stalls that cost about 7% of an evaluation.
	r.Key, r.Variant, r.Payload = f.key, "", nil
	r.ID, r.Version, r.ConditionIndex = f.id, f.version, -1
	r.Active, r.Enabled, r.Reason, r.Failed = f.active, false, 0, false
	if !f.active {
		r.Reason = ReasonDisabled
		return
	}
	if f.missingDependency {
		r.Reason = ReasonMissingDependency
		return
	}
	e.current, e.failed, e.groupIndex, e.haveRollout, e.haveVariant, e.noSubject = f, false, int(f.groupIndex), false, false, false
	if e.pending == f {
		e.rolloutHash, e.haveRollout, e.pending = int64(e.pendingHash), true, nil
	}
	e.hashSubj = e.req.DistinctID
	if f.groupIndex >= 0 {
		e.groupName = e.snap.groupTypes[f.groupIndex]
		key, ok := e.req.Groups[e.groupName]
		if !f.perCondition && (e.groupName == "" || !ok || key == "") {
			r.Reason = ReasonNoGroupType
			return
		}
		e.groupKey, e.hashSubj = key, key
	} else if f.continuity {
		if override, ok := e.req.HashKeyOverrides[f.key]; ok && override != "" {
			e.hashSubj = override
		}
	}

	if f.rare != nil && e.rareConditions(f, r) {
		e.finish(r)
		return
	}

	best, bestIndex := ReasonNoConditionMatch, -1
	for i := range f.conditions {
		c := &f.conditions[i]
		var matched bool
		var reason Reason
		if f.perCondition && !e.subject(f, c) {
			reason = ReasonNoGroupType
		} else {
			matched, reason = e.condition(c)
		}
		if matched {
			r.Reason, r.ConditionIndex = ReasonConditionMatch, i
			e.enable(r, f, c.variant)
			e.finish(r)
			return
		}
		if reason == ReasonOutOfRolloutBound && f.earlyExit {
			best, bestIndex = reason, i
			break
		}
		if reason >= best {
			best, bestIndex = reason, i
		}
	}
	r.Reason, r.ConditionIndex = best, bestIndex
	e.finish(r)
}

// subject chooses what a condition of a per-condition flag buckets on: the key of its group,
// the device id, or the flag's person subject. It reports false when the condition's group
// is not in the request.
func (e *evaluation) subject(f *compiledFlag, c *condition) bool {
	subj, group := e.req.DistinctID, int(c.groupIndex)
	e.noSubject = false
	switch {
	case group >= 0:
		name := e.snap.groupTypes[group]
		key, ok := e.req.Groups[name]
		if name == "" || !ok || key == "" {
			return false
		}
		e.groupName, e.groupKey, subj = name, key, key
	case c.device:
		subj = e.deviceID()
		e.noSubject = subj == ""
	case f.continuity:
		if override, ok := e.req.HashKeyOverrides[f.key]; ok && override != "" {
			subj = override
		}
	}
	e.groupIndex = group
	if subj != e.hashSubj {
		e.hashSubj, e.haveRollout, e.haveVariant = subj, false, false
	}
	return true
}

// deviceID is the request's device id, else the person properties' $device_id.
func (e *evaluation) deviceID() string {
	if e.req.DeviceID != "" {
		return e.req.DeviceID
	}
	s, _ := e.req.PersonProperties["$device_id"].(string)
	return s
}

// rareConditions applies a flag's super condition and holdouts, and reports whether one of
// them decided the flag.
func (e *evaluation) rareConditions(f *compiledFlag, r *Result) bool {
	if super := f.rare.super; len(super) > 0 && e.superConditionSet(&super[0]) {
		matched, _ := e.condition(&super[0])
		r.Reason, r.ConditionIndex = ReasonSuperConditionValue, 0
		if matched {
			e.enable(r, f, -1)
		}
		return true
	}
	for i := range f.rare.holdout {
		h := &f.rare.holdout[i]
		if ok, _ := e.propertiesMatch(&h.condition); ok && (h.rollout == maxHash || int64(e.hash("holdout-", false, "")) <= h.rollout) {
			r.Enabled, r.Variant, r.Reason, r.ConditionIndex = true, h.variantKey, ReasonHoldoutConditionValue, i
			return true
		}
	}
	return false
}

// finish marks a flag failed when it read a property that could not be fetched.
func (e *evaluation) finish(r *Result) {
	if e.failed {
		r.Failed, r.Enabled, r.Variant, r.Payload, r.Reason, r.ConditionIndex = true, false, "", nil, ReasonError, -1
	}
}

// hash is PostHog's hash value of prefix + "." (with sep) + the hash subject + salt.
func (e *evaluation) hash(prefix string, sep bool, salt string) uint64 {
	if blocksAvailable && e.blocks[0].fill(prefix, sep, e.hashSubj, salt) {
		return e.blocks[0].value()
	}
	if e.hasher == nil {
		e.hasher = hashers.Get().(*hasher)
	}
	return e.hasher.hash(prefix, sep, e.hashSubj, salt)
}

// fillFlag pads the flag's key + "." + subj + the salt ("variant" when variant, else none)
// into b, and reports whether it fitted.
func (e *evaluation) fillFlag(b *block, f *compiledFlag, subj string, variant bool) bool {
	salt, t := "", &e.tails[0]
	if variant {
		salt, t = "variant", &e.tails[1]
	}
	if f.keyBlock == nil {
		return b.fill(f.key, true, subj, salt)
	}
	if !t.set || t.subj != subj {
		t.place(subj, salt)
	}
	return b.join(f.keyBlock, len(f.key)+1, t)
}

// flagHash is the current subject's hash for the flag: its rollout hash, or with variant its
// variant hash.
func (e *evaluation) flagHash(f *compiledFlag, variant bool) uint64 {
	if blocksAvailable && e.fillFlag(&e.blocks[0], f, e.hashSubj, variant) {
		return e.blocks[0].value()
	}
	if variant {
		return e.hash(f.key, true, "variant")
	}
	return e.hash(f.key, true, "")
}

// rolloutAndVariant computes the current flag's rollout hash and, when it has variants to
// hash, its variant hash with it, which enable then uses.
func (e *evaluation) rolloutAndVariant(c *condition) {
	f := e.current
	if c.variant < 0 && f.values != nil && len(f.values.variants) > 0 && blocksAvailable &&
		e.fillFlag(&e.blocks[0], f, e.hashSubj, false) && e.fillFlag(&e.blocks[1], f, e.hashSubj, true) {
		r, v := values(&e.blocks[0], &e.blocks[1])
		e.rolloutHash, e.haveRollout, e.variantHash, e.haveVariant = int64(r), true, v, true
		return
	}
	// A hashed flag buckets by the distinct id (markHashed), as its partner does.
	if f.hashed && f.hashPartner >= 0 && blocksAvailable && e.fillFlag(&e.blocks[0], f, e.hashSubj, false) {
		partner := &e.snap.flags[f.hashPartner]
		if e.fillFlag(&e.blocks[1], partner, e.req.DistinctID, false) {
			r, p := values(&e.blocks[0], &e.blocks[1])
			e.rolloutHash, e.haveRollout, e.pending, e.pendingHash = int64(r), true, partner, p
			return
		}
	}
	e.rolloutHash, e.haveRollout = int64(e.flagHash(f, false)), true
}

// enable sets the value of a matched flag: the override variant, else the hashed variant,
// else true; and the payload of that value.
func (e *evaluation) enable(r *Result, f *compiledFlag, override int) {
	r.Enabled = true
	vi := override
	if f.values == nil {
		return
	}
	if variants := f.values.variants; vi < 0 && len(variants) > 0 {
		if !e.haveVariant {
			e.variantHash, e.haveVariant = e.flagHash(f, true), true
		}
		x := int64(e.variantHash)
		for i := range variants {
			if x > variants[i].above && x <= variants[i].upTo {
				vi = i
				break
			}
		}
	}
	if vi >= 0 {
		r.Variant, r.Payload = f.values.variants[vi].key, f.values.variants[vi].payload
		return
	}
	r.Payload = f.values.payloadTrue
}

// condition reports whether a condition matches, or the reason it does not.
func (e *evaluation) condition(c *condition) (bool, Reason) {
	if ok, _ := e.propertiesMatch(c); !ok {
		return false, ReasonNoConditionMatch
	}
	if e.noSubject && (c.rollout < maxHash || (c.variant < 0 && e.current.values != nil && e.current.values.split)) {
		return false, ReasonOutOfRolloutBound
	}
	if c.rollout < maxHash {
		if !e.haveRollout {
			e.rolloutAndVariant(c)
		}
		if e.rolloutHash > c.rollout {
			return false, ReasonOutOfRolloutBound
		}
	}
	return true, ReasonConditionMatch
}

// superConditionSet reports whether the super condition's property is known for the person:
// only then does it decide the flag.
func (e *evaluation) superConditionSet(c *condition) bool {
	if len(c.matchers) == 0 {
		return false
	}
	_, ok := e.personProperty(c.matchers[0].matcher)
	return ok
}

func (e *evaluation) propertiesMatch(c *condition) (bool, Reason) {
	for _, m := range c.matchers {
		if !e.match(m) {
			return false, ReasonNoConditionMatch
		}
	}
	return true, ReasonConditionMatch
}

// matchFilter evaluates one filter, negation included.
func (e *evaluation) matchFilter(m *matcher) bool {
	var ok bool
	switch m.source {
	case sourcePerson, sourceGroup:
		ok = e.matchProperty(m)
	case sourceCohort:
		ok = e.inCohort(m.cohort)
		if m.op == opNotIn {
			ok = !ok
		}
	case sourceFlag:
		ok = e.flagValueIs(m)
	}
	return ok != m.negation
}

func (e *evaluation) matchProperty(m *matcher) bool {
	var v any
	var ok bool
	if m.source == sourcePerson {
		v, ok = e.lookupPerson(m)
	} else {
		v, ok = e.lookupGroup(m)
	}
	if !ok {
		return m.valid && m.op.whenMissing()
	}
	return m.matchValue(v, e)
}

// clock returns the time relative dates count back from: the request's, else the time the
// evaluation first needs it (most evaluations never do), the same for every later filter.
func (e *evaluation) clock() time.Time {
	if e.now.IsZero() {
		e.now = time.Now()
	}
	return e.now
}

func (e *evaluation) lookupPerson(m *matcher) (any, bool) {
	v, ok := e.personProperty(m)
	if !ok && e.req.PersonLookupFailed {
		e.failed = true
	}
	return v, ok
}

// personProperty is personValue(m.key), read once per evaluation when the matcher has a
// person slot.
func (e *evaluation) personProperty(m *matcher) (any, bool) {
	if m.personSlot == 0 {
		return e.personValue(m.key)
	}
	i := m.personSlot - 1
	bit := uint32(1) << i
	if e.personKnown&bit != 0 {
		return e.person[i], e.personFound&bit != 0
	}
	v, ok := e.personValue(m.key)
	e.person[i] = v
	e.personKnown |= bit
	if ok {
		e.personFound |= bit
	}
	return v, ok
}

// personValue finds a person property in the request's layers; distinct_id is the request's
// unless the request's properties name another (PostHog's server puts the distinct id among
// the stored properties, under the request's). The request's properties win, and a null one
// stands (it is a property set to null) unless GeoIP has the key; stored properties come last.
func (e *evaluation) personValue(key string) (any, bool) {
	v, sent := e.req.PersonProperties[key]
	if key == "distinct_id" && !sent {
		return e.req.DistinctID, true
	}
	if sent && v != nil {
		return v, true
	}
	if g, ok := e.req.GeoIP[key]; ok && g != nil {
		return g, true
	}
	if sent {
		return nil, true
	}
	v, ok := e.req.StoredPerson[key]
	return v, ok
}

func (e *evaluation) lookupGroup(m *matcher) (any, bool) {
	name, groupKey := e.groupName, e.groupKey
	if m.groupIndex != e.groupIndex { // a group property of another type than the flag's
		name = e.snap.groupTypes[m.groupIndex]
		groupKey = e.req.Groups[name]
	}
	if m.key == "$group_key" && groupKey != "" {
		return groupKey, true
	}
	if v, ok := e.req.GroupProperties[name][m.key]; ok {
		return v, true
	}
	if v, ok := e.req.StoredGroups[name][m.key]; ok {
		return v, true
	}
	if e.req.GroupLookupFailed&(1<<m.groupIndex) != 0 {
		e.failed = true
	}
	return nil, false
}

func (e *evaluation) inCohort(c *cohort) bool {
	switch {
	case c.unknown:
		return false
	case c.static:
		for _, id := range e.req.StaticCohorts {
			if id == c.id {
				return true
			}
		}
		if e.req.PersonLookupFailed {
			e.failed = true
		}
		return false
	}
	return e.group(c.group)
}

func (e *evaluation) group(g *propertyGroup) bool {
	if len(g.items) == 0 {
		return true
	}
	for _, it := range g.items {
		var ok bool
		if it.group != nil {
			ok = e.group(it.group)
		} else {
			ok = e.match(it.matcher)
		}
		if g.and && !ok {
			return false
		}
		if !g.and && ok {
			return true
		}
	}
	return g.and
}

// flagValueIs compares an already evaluated flag with the expected value: true matches any
// enabled value, false a disabled one, a string that variant; any other value, or a flag
// the request's answer leaves out (Snapshot.Selected), nothing. PostHog's server evaluates
// only the flags it keeps, and a filter on one it has no result for does not match
// (rust/feature-flags/src/flags/flag_matching_utils.rs: match_flag_value_to_flag_filter).
func (e *evaluation) flagValueIs(m *matcher) bool {
	if m.flagIndex < 0 || !m.valid || (e.selective && !e.snap.Selected(m.flagIndex, e.req.Runtime, e.req.EvaluationContexts)) {
		return false
	}
	dep := &e.results[m.flagIndex]
	if dep.Failed {
		e.failed = true
		return false
	}
	if m.expectIsS {
		return dep.Enabled && dep.Variant == m.expectStr
	}
	return dep.Enabled == m.expectBool
}
