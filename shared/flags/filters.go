package flags

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Filters is a flag's targeting definition, as stored and sent over the wire.
type Filters struct {
	Groups                    []Condition                `json:"groups"`
	Multivariate              *Multivariate              `json:"multivariate"`
	Payloads                  map[string]json.RawMessage `json:"payloads"`
	AggregationGroupTypeIndex *int                       `json:"aggregation_group_type_index"`
	SuperGroups               []Condition                `json:"super_groups"`
	HoldoutGroups             []Condition                `json:"holdout_groups"`
	// EarlyExit stops evaluation at the first condition whose properties match but whose
	// rollout leaves the user out: the flag is then false.
	EarlyExit bool `json:"early_exit"`
	// BucketingIdentifier is "device_id" to bucket person conditions on the request's device
	// id instead of its distinct_id; "" or "distinct_id" otherwise.
	BucketingIdentifier string `json:"bucketing_identifier"`
}

// Multivariate lists a flag's variants.
type Multivariate struct {
	Variants []Variant `json:"variants"`
}

// Variant is one value of a multivariate flag and its share of the rollout.
type Variant struct {
	Key               string  `json:"key"`
	Name              string  `json:"name"`
	RolloutPercentage float64 `json:"rollout_percentage"`
}

// Condition is one OR-ed condition set: every property must match, then the rollout applies.
type Condition struct {
	Properties        []Property `json:"properties"`
	RolloutPercentage *float64   `json:"rollout_percentage"`
	Variant           *string    `json:"variant"`
	// AggregationGroupTypeIndex aggregates this condition by another unit than the flag:
	// absent inherits the flag's, null is persons, a number that group type.
	AggregationGroupTypeIndex OptionalIndex `json:"aggregation_group_type_index"`
	// BucketingIdentifier overrides the flag's for this condition.
	BucketingIdentifier string `json:"bucketing_identifier"`
}

// OptionalIndex is a group type index that can be absent, null or a number.
type OptionalIndex struct {
	Set   bool // present in the JSON (null included)
	Index *int // nil for null
}

// UnmarshalJSON reads null or a number; being called at all means the key is present.
func (o *OptionalIndex) UnmarshalJSON(b []byte) error {
	o.Set, o.Index = true, nil
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	return json.Unmarshal(b, &o.Index)
}

// MarshalJSON writes null or the number.
func (o OptionalIndex) MarshalJSON() ([]byte, error) { return json.Marshal(o.Index) }

// groupIndex is the condition's aggregation: its own when set, else the flag's; -1 for
// persons.
func (c *Condition) groupIndex(flag *int) int {
	idx := flag
	if c.AggregationGroupTypeIndex.Set {
		idx = c.AggregationGroupTypeIndex.Index
	}
	if idx == nil {
		return -1
	}
	return *idx
}

// Property is one property filter. Value holds a decoded JSON value (numbers as json.Number).
type Property struct {
	Key            string `json:"key"`
	Value          any    `json:"value"`
	Operator       string `json:"operator"`
	Type           string `json:"type"`
	GroupTypeIndex *int   `json:"group_type_index"`
	Negation       bool   `json:"negation"`
}

// Property types.
const (
	TypePerson = "person"
	TypeGroup  = "group"
	TypeCohort = "cohort"
	TypeFlag   = "flag"
)

// DefinitionError describes why a flag definition is invalid. Its message is user-safe.
type DefinitionError struct {
	Msg string
}

func (e *DefinitionError) Error() string { return e.Msg }

func invalidf(format string, args ...any) error {
	return &DefinitionError{Msg: fmt.Sprintf(format, args...)}
}

// ParseFilters decodes and validates a filters document. Every error it returns is a
// *DefinitionError with a user-safe message.
func ParseFilters(data []byte) (*Filters, error) {
	var f Filters
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, invalidf("Invalid filters: %s", describeJSONError(err))
	}
	if dec.More() {
		return nil, invalidf("Invalid filters: trailing data after the object.")
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// decodeFilters decodes a filters document for compilation: without the checks of Validate,
// since a definition PostHog would evaluate must compile (an operand the engine cannot read
// matches nothing), but with the group type indexes in range.
func decodeFilters(data []byte) (*Filters, error) {
	var f Filters
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, invalidf("Invalid filters: %s", describeJSONError(err))
	}
	if i := f.AggregationGroupTypeIndex; i != nil && (*i < 0 || *i >= maxGroupTypes) {
		return nil, invalidf("aggregation_group_type_index must be between 0 and 4.")
	}
	for _, c := range f.Groups {
		if i := c.AggregationGroupTypeIndex.Index; i != nil && (*i < 0 || *i >= maxGroupTypes) {
			return nil, invalidf("aggregation_group_type_index must be between 0 and 4.")
		}
	}
	return &f, nil
}

func describeJSONError(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		if te.Field != "" {
			return fmt.Sprintf("%s must be of type %s, not %s.", te.Field, jsonTypeName(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("expected %s, got %s.", jsonTypeName(te.Type.Kind().String()), te.Value)
	}
	return err.Error()
}

func jsonTypeName(kind string) string {
	switch kind {
	case "struct", "map":
		return "object"
	case "slice":
		return "array"
	case "float64", "int":
		return "number"
	case "ptr":
		return "object or null"
	}
	return kind
}

// Validate checks the semantic rules of a definition: variants, payloads, rollouts,
// property types and operator values.
func (f *Filters) Validate() error {
	if f.AggregationGroupTypeIndex != nil && (*f.AggregationGroupTypeIndex < 0 || *f.AggregationGroupTypeIndex > 4) {
		return invalidf("aggregation_group_type_index must be between 0 and 4.")
	}
	variants := map[string]bool{}
	if f.Multivariate != nil {
		var sum float64
		for _, v := range f.Multivariate.Variants {
			if v.Key == "" {
				return invalidf("Invalid variant definitions: every variant needs a key.")
			}
			if variants[v.Key] {
				return invalidf("Invalid variant definitions: variant key %q is repeated.", v.Key)
			}
			if v.RolloutPercentage < 0 || v.RolloutPercentage > 100 {
				return invalidf("Invalid variant definitions: rollout percentages must be between 0 and 100.")
			}
			variants[v.Key] = true
			sum += v.RolloutPercentage
		}
		if len(f.Multivariate.Variants) > 0 && (sum < 99.9999 || sum > 100.0001) {
			return invalidf("Invalid variant definitions: Variant rollout percentages must sum to 100.")
		}
	}
	for name, groups := range map[string][]Condition{"groups": f.Groups, "super_groups": f.SuperGroups, "holdout_groups": f.HoldoutGroups} {
		for i, c := range groups {
			known := variants
			if name == "holdout_groups" {
				known = nil // a holdout names a variant of its own, e.g. "holdout-7"
			}
			if err := f.validateCondition(c, known); err != nil {
				return invalidf("Invalid %s[%d]: %s", name, i, err.Error())
			}
		}
	}
	for key, payload := range f.Payloads {
		if len(variants) > 0 {
			if !variants[key] {
				return invalidf("Payload key %q is not a variant of this flag.", key)
			}
		} else if key != "true" {
			return invalidf("Payload key %q is not allowed: a boolean flag has only the payload \"true\".", key)
		}
		if err := validatePayload(payload); err != nil {
			return invalidf("Payload for %q is not valid JSON.", key)
		}
	}
	return nil
}

func validatePayload(raw json.RawMessage) error {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if !json.Valid([]byte(s)) {
			return invalidf("not JSON")
		}
		return nil
	}
	if !json.Valid(raw) {
		return invalidf("not JSON")
	}
	return nil
}

func (f *Filters) validateCondition(c Condition, variants map[string]bool) error {
	if c.RolloutPercentage != nil && (*c.RolloutPercentage < 0 || *c.RolloutPercentage > 100) {
		return invalidf("rollout_percentage must be between 0 and 100.")
	}
	if c.Variant != nil && *c.Variant != "" && variants != nil && !variants[*c.Variant] {
		return invalidf("variant %q does not exist on this flag.", *c.Variant)
	}
	if i := c.AggregationGroupTypeIndex.Index; i != nil && (*i < 0 || *i > 4) {
		return invalidf("aggregation_group_type_index must be between 0 and 4.")
	}
	gi := c.groupIndex(f.AggregationGroupTypeIndex)
	for _, p := range c.Properties {
		if err := validateProperty(p, gi); err != nil {
			return err
		}
	}
	return nil
}

// validateProperty checks a filter of a condition aggregated by group type gi (-1: persons).
func validateProperty(p Property, gi int) error {
	typ := p.Type
	if typ == "" {
		typ = TypePerson
	}
	if gi < 0 {
		switch typ {
		case TypePerson, TypeCohort, TypeFlag:
		case TypeGroup:
			return invalidf("a flag aggregated by person cannot use group properties (property %q).", p.Key)
		default:
			return invalidf("property type %q is not supported.", p.Type)
		}
	} else {
		if typ != TypeGroup {
			return invalidf("a group flag can only use group properties (property %q has type %q).", p.Key, typ)
		}
		if p.GroupTypeIndex == nil || *p.GroupTypeIndex != gi {
			return invalidf("property %q must belong to the flag's group type.", p.Key)
		}
	}
	// PostHog's API stores a flag filter without a key (posthog/api/feature_flag.py checks
	// only its operator and cycles); its condition never matches.
	if p.Key == "" && typ != TypeFlag {
		return invalidf("every property filter needs a key.")
	}
	return ValidateOperator(typ, p.Operator, p.Value)
}

// ValidateOperator checks that the operator exists for the property type and that the value
// has the form the operator needs.
func ValidateOperator(typ, op string, value any) error {
	op = defaultOperator(typ, op)
	switch typ {
	case TypeCohort:
		if op != OpIn && op != OpNotIn {
			return invalidf("cohort filters take the operator in or not_in, not %q.", op)
		}
		if _, ok := cohortID(value); !ok {
			return invalidf("a cohort filter's value must be a cohort id.")
		}
		return nil
	case TypeFlag:
		if op != OpFlagEvaluatesTo {
			return invalidf("flag filters take the operator flag_evaluates_to, not %q.", op)
		}
		// PostHog's API takes any value; its server matches true, false or a variant key
		// and nothing else (rust/feature-flags/src/flags/flag_matching_utils.rs:
		// match_flag_value_to_flag_filter), as the engine does.
		return nil
	}
	switch op {
	case OpExact, OpIsNot:
		if !isScalarOrScalarList(value) {
			return invalidf("operator %s takes a string, number, boolean or a list of them.", op)
		}
	case OpIsSet, OpIsNotSet:
	case OpIContains, OpNotIContains, OpStartsWith, OpEndsWith, OpNotStartsWith, OpNotEndsWith, OpRegex, OpNotRegex:
		// Any pattern is accepted, as PostHog accepts it; one that does not compile matches
		// nothing.
		if _, ok := value.(string); !ok {
			return invalidf("operator %s takes a string value.", op)
		}
	case OpGT, OpGTE, OpLT, OpLTE:
		switch value.(type) {
		case string, json.Number, float64:
		default:
			return invalidf("operator %s takes a number or a string.", op)
		}
	case OpDateBefore, OpDateAfter, OpDateExact, OpSemverEq, OpSemverNeq, OpSemverGT, OpSemverGTE, OpSemverLT,
		OpSemverLTE, OpSemverTilde, OpSemverCaret, OpSemverWildcard:
		// A date or version the server cannot read is no match, not a refused flag.
		if _, ok := value.(string); !ok {
			return invalidf("operator %s takes a string value.", op)
		}
	case OpIn, OpNotIn, OpFlagEvaluatesTo:
		return invalidf("operator %s is only for %s filters.", op, map[string]string{OpIn: "cohort", OpNotIn: "cohort", OpFlagEvaluatesTo: "flag"}[op])
	default:
		return invalidf("unknown operator %q.", op)
	}
	return nil
}

// defaultOperator is the operator a filter of the type has when it names none.
func defaultOperator(typ, op string) string {
	if op != "" {
		return op
	}
	switch typ {
	case TypeCohort:
		return OpIn
	case TypeFlag:
		return OpFlagEvaluatesTo
	}
	return OpExact
}

func isScalar(v any) bool {
	switch v.(type) {
	case string, bool, json.Number, float64:
		return true
	}
	return false
}

func isScalarOrScalarList(v any) bool {
	if list, ok := v.([]any); ok {
		for _, e := range list {
			if !isScalar(e) {
				return false
			}
		}
		return true
	}
	return isScalar(v)
}

// cohortID reads a cohort filter's value: a number or a numeric string.
func cohortID(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		id, err := strconv.ParseInt(x.String(), 10, 64)
		return id, err == nil
	case float64:
		return int64(x), x == float64(int64(x))
	case string:
		id, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return id, err == nil
	}
	return 0, false
}

// IsSimple reports whether the flag is a plain rollout: one condition without properties,
// aggregated by person.
func (f *Filters) IsSimple() bool {
	return len(f.Groups) == 1 && len(f.Groups[0].Properties) == 0 && f.AggregationGroupTypeIndex == nil
}

// References lists the cohorts and flags (by key or id, as written) that a definition's
// filters refer to.
func (f *Filters) References() (cohorts []int64, flagRefs []string) {
	for _, set := range [][]Condition{f.Groups, f.SuperGroups, f.HoldoutGroups} {
		for _, c := range set {
			for _, p := range c.Properties {
				switch p.Type {
				case TypeCohort:
					if id, ok := cohortID(p.Value); ok {
						cohorts = append(cohorts, id)
					}
				case TypeFlag:
					if p.Key != "" { // refers to no flag: the condition never matches
						flagRefs = append(flagRefs, p.Key)
					}
				}
			}
		}
	}
	return cohorts, flagRefs
}
