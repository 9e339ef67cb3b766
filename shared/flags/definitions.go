package flags

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
)

// DefinitionsBody builds the flag definitions document that SDKs download for local
// evaluation (docs/api.md, Flag definitions): every flag (inactive ones included), the group
// type mapping, and the cohorts. With sendCohorts, cohorts are sent as property groups
// (static ones cannot be evaluated locally and are left out); without it, a flag that
// references exactly one property cohort made of plain person conditions gets them inlined
// instead. Flag dependencies are named by key and carry the dependency_chain SDKs need. Every
// flag is sent whatever its evaluation_runtime, which it carries with its evaluation tags
// (as evaluation_tags and, PostHog's newer name, evaluation_contexts) and its
// bucketing_identifier, as PostHog's server sends them (its SDKs evaluate them all).
//
// The output is deterministic: the same project always gives the same bytes.
func DefinitionsBody(projectID int64, p Project, sendCohorts bool) ([]byte, error) {
	type wireFlag struct {
		ID                         int64          `json:"id"`
		TeamID                     int64          `json:"team_id"`
		Name                       string         `json:"name"`
		Key                        string         `json:"key"`
		Filters                    map[string]any `json:"filters"`
		Deleted                    bool           `json:"deleted"`
		Active                     bool           `json:"active"`
		EnsureExperienceContinuity bool           `json:"ensure_experience_continuity"`
		Version                    int            `json:"version"`
		EvaluationRuntime          string         `json:"evaluation_runtime"`
		EvaluationTags             []string       `json:"evaluation_tags"`
		EvaluationContexts         []string       `json:"evaluation_contexts"`
		BucketingIdentifier        *string        `json:"bucketing_identifier"`
	}
	defs := make([]FlagDefinition, len(p.Flags))
	copy(defs, p.Flags)
	sort.Slice(defs, func(i, j int) bool { return defs[i].ID < defs[j].ID })
	keyByRef := map[string]string{}
	for _, d := range defs {
		keyByRef[d.Key] = d.Key
		keyByRef[strconv.FormatInt(d.ID, 10)] = d.Key
	}
	cohorts := map[int64]CohortDefinition{}
	for _, c := range p.Cohorts {
		cohorts[c.ID] = c
	}
	deps := map[string][]string{} // flag key → keys it depends on directly
	parsed := make([]map[string]any, len(defs))
	for i, d := range defs {
		filters, err := decodeObject(d.Filters)
		if err != nil {
			return nil, err
		}
		parsed[i] = filters
		forEachProperty(filters, func(prop map[string]any) {
			normalizeProperty(prop)
			if prop["type"] == TypeFlag {
				ref, _ := prop["key"].(string)
				if key, ok := keyByRef[ref]; ok {
					prop["key"] = key
					deps[d.Key] = append(deps[d.Key], key)
				}
			}
		})
	}
	body := struct {
		Flags            []wireFlag     `json:"flags"`
		GroupTypeMapping map[string]any `json:"group_type_mapping"`
		Cohorts          map[string]any `json:"cohorts"`
	}{Flags: []wireFlag{}, GroupTypeMapping: map[string]any{}, Cohorts: map[string]any{}}
	sent := map[int64]bool{}
	for i, d := range defs {
		filters := parsed[i]
		forEachProperty(filters, func(prop map[string]any) {
			if prop["type"] == TypeFlag {
				key, _ := prop["key"].(string)
				prop["dependency_chain"] = dependencyChain(key, deps)
			}
		})
		if sendCohorts {
			forEachProperty(filters, func(prop map[string]any) {
				if prop["type"] == TypeCohort {
					if id, ok := cohortID(prop["value"]); ok {
						addCohort(id, cohorts, body.Cohorts, sent)
					}
				}
			})
		} else {
			inlineSimpleCohort(filters, cohorts)
		}
		body.Flags = append(body.Flags, wireFlag{ID: d.ID, TeamID: projectID, Name: d.Name, Key: d.Key, Filters: filters,
			Active: d.Active, EnsureExperienceContinuity: d.EnsureExperienceContinuity, Version: d.Version,
			EvaluationRuntime: ParseRuntime(d.EvaluationRuntime).String(), EvaluationTags: nonNilStrings(d.EvaluationTags),
			EvaluationContexts: nonNilStrings(d.EvaluationTags), BucketingIdentifier: bucketingOf(d, filters)})
	}
	for i, name := range p.GroupTypes {
		body.GroupTypeMapping[strconv.Itoa(i)] = name
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// bucketingOf is a flag's bucketing_identifier as SDKs read it (at the flag's level): the
// flag's, else its filters', else null.
func bucketingOf(d FlagDefinition, filters map[string]any) *string {
	if d.BucketingIdentifier != "" {
		return &d.BucketingIdentifier
	}
	if b, ok := filters["bucketing_identifier"].(string); ok && b != "" {
		return &b
	}
	return nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ETag returns the weak entity tag of a body: W/"<first 16 hex digits of its SHA-256>".
func ETag(body []byte) string {
	sum := sha256.Sum256(body)
	return `W/"` + hex.EncodeToString(sum[:8]) + `"`
}

// ETagMatches reports whether an If-None-Match header value names etag. Comparison is weak,
// as for GET: the W/ prefix is ignored on both sides, a list matches when any member does, and
// "*" matches anything. Both programs serve flag definitions and answer 304 by this rule.
func ETagMatches(ifNoneMatch, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for part := range strings.SplitSeq(ifNoneMatch, ",") {
		part = strings.TrimPrefix(strings.TrimSpace(part), "W/")
		if part == want || part == "*" {
			return true
		}
	}
	return false
}

func decodeObject(raw json.RawMessage) (map[string]any, error) {
	out := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}

// forEachProperty calls fn on every property filter of every condition of a filters object.
func forEachProperty(filters map[string]any, fn func(prop map[string]any)) {
	for _, set := range []string{"groups", "super_groups", "holdout_groups"} {
		conds, _ := filters[set].([]any)
		for _, c := range conds {
			cond, _ := c.(map[string]any)
			props, _ := cond["properties"].([]any)
			for _, p := range props {
				if prop, ok := p.(map[string]any); ok {
					fn(prop)
				}
			}
		}
	}
}

// dependencyChain lists the flags to evaluate before key, dependencies first, ending with
// key itself; it is empty when key is part of a cycle.
func dependencyChain(key string, deps map[string][]string) []string {
	chain := []string{}
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(k string) bool
	visit = func(k string) bool {
		switch state[k] {
		case 1:
			return false
		case 2:
			return true
		}
		state[k] = 1
		for _, d := range deps[k] {
			if !visit(d) {
				return false
			}
		}
		state[k] = 2
		chain = append(chain, k)
		return true
	}
	if !visit(key) {
		return []string{}
	}
	return chain
}

// addCohort adds a property cohort, and the cohorts it references, to out.
func addCohort(id int64, cohorts map[int64]CohortDefinition, out map[string]any, sent map[int64]bool) {
	c, ok := cohorts[id]
	if !ok || c.Static || sent[id] {
		return
	}
	sent[id] = true
	body, err := decodeObject(c.Filters)
	if err != nil {
		return
	}
	group, ok := body["properties"].(map[string]any)
	if !ok {
		return
	}
	out[strconv.FormatInt(id, 10)] = group
	var walk func(g map[string]any)
	walk = func(g map[string]any) {
		values, _ := g["values"].([]any)
		for _, v := range values {
			item, _ := v.(map[string]any)
			if _, isGroup := item["values"]; isGroup {
				walk(item)
				continue
			}
			normalizeProperty(item)
			if item["type"] == TypeCohort {
				if ref, ok := cohortID(item["value"]); ok {
					addCohort(ref, cohorts, out, sent)
				}
			}
		}
	}
	walk(group)
}

// normalizeProperty spells out what the API lets a filter leave implicit, since SDKs
// evaluating locally do not: the person type and the default operator.
func normalizeProperty(prop map[string]any) {
	if t, _ := prop["type"].(string); t == "" {
		prop["type"] = TypePerson
	}
	if op, _ := prop["operator"].(string); op == "" {
		t, _ := prop["type"].(string)
		prop["operator"] = defaultOperator(t, "")
	}
}

// inlineSimpleCohort replaces the one cohort filter of a flag with the cohort's person
// conditions when the flag references exactly one cohort and that cohort is one AND of plain
// person filters (possibly wrapped in an OR of one).
func inlineSimpleCohort(filters map[string]any, cohorts map[int64]CohortDefinition) {
	var refs []map[string]any
	forEachProperty(filters, func(prop map[string]any) {
		if prop["type"] == TypeCohort {
			refs = append(refs, prop)
		}
	})
	if len(refs) != 1 || refs[0]["operator"] == OpNotIn || refs[0]["negation"] == true {
		return
	}
	id, ok := cohortID(refs[0]["value"])
	if !ok {
		return
	}
	c, ok := cohorts[id]
	if !ok || c.Static {
		return
	}
	body, err := decodeObject(c.Filters)
	if err != nil {
		return
	}
	props := simplePersonConditions(body["properties"])
	if props == nil {
		return
	}
	for _, set := range []string{"groups", "super_groups", "holdout_groups"} {
		conds, _ := filters[set].([]any)
		for _, cnd := range conds {
			cond, _ := cnd.(map[string]any)
			list, _ := cond["properties"].([]any)
			var out []any
			for _, p := range list {
				if prop, ok := p.(map[string]any); ok && prop["type"] == TypeCohort {
					out = append(out, props...)
				} else {
					out = append(out, p)
				}
			}
			if list != nil {
				cond["properties"] = out
			}
		}
	}
}

// simplePersonConditions returns the person filters of a group that is an AND of them, or
// an OR holding exactly one such AND; nil otherwise.
func simplePersonConditions(v any) []any {
	g, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	values, _ := g["values"].([]any)
	if g["type"] == "OR" {
		if len(values) != 1 {
			return nil
		}
		if inner, ok := values[0].(map[string]any); ok {
			if _, isGroup := inner["values"]; isGroup {
				return simplePersonConditions(inner)
			}
		}
	}
	var out []any
	for _, v := range values {
		prop, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if _, isGroup := prop["values"]; isGroup {
			return nil
		}
		if t, _ := prop["type"].(string); t != "" && t != TypePerson {
			return nil
		}
		if prop["negation"] == true {
			return nil
		}
		normalizeProperty(prop)
		out = append(out, prop)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
