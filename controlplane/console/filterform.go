package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// filterForm is a flag's filters as the edit form shows them: release conditions with their
// property filters, variants with their payloads, and the flag's group type. Keys of the
// filters the form does not edit (super_groups, holdout_groups, …) are kept as they were.
type filterForm struct {
	Conditions     []conditionForm
	Variants       []variantForm
	PayloadTrue    string
	GroupTypeIndex string // "" aggregates by person, else the group type index
	rest           map[string]json.RawMessage
}

type conditionForm struct {
	Rollout    string
	Variant    string
	Properties []propertyForm
}

type propertyForm struct {
	Key, Operator, Value, Type string
	Negation                   bool
}

type variantForm struct {
	Key, Name, Rollout, Payload string
}

// operators are the property operators the form offers, with their labels.
var operators = []struct{ Value, Label string }{
	{"exact", "equals"}, {"is_not", "doesn't equal"}, {"icontains", "contains"}, {"not_icontains", "doesn't contain"},
	{"regex", "matches regex"}, {"not_regex", "doesn't match regex"}, {"starts_with", "starts with"}, {"ends_with", "ends with"},
	{"gt", "greater than"}, {"gte", "at least"}, {"lt", "less than"}, {"lte", "at most"},
	{"is_set", "is set"}, {"is_not_set", "is not set"},
	{"is_date_before", "before date"}, {"is_date_after", "after date"}, {"is_date_exact", "on date"},
	{"semver_gt", "semver >"}, {"semver_gte", "semver ≥"}, {"semver_lt", "semver <"}, {"semver_lte", "semver ≤"}, {"semver_eq", "semver ="},
	{"in", "in cohort"}, {"not_in", "not in cohort"}, {"flag_evaluates_to", "flag evaluates to"},
}

// propertyTypes are the kinds of property filter the form offers.
var propertyTypes = []struct{ Value, Label string }{
	{"person", "Person property"}, {"group", "Group property"}, {"cohort", "Cohort"}, {"flag", "Another flag"},
}

// Describe is the filter in words, e.g. "email contains example.com".
func (p propertyForm) Describe() string {
	label := p.Operator
	for _, o := range operators {
		if o.Value == p.Operator {
			label = o.Label
		}
	}
	switch p.Operator {
	case "is_set", "is_not_set":
		return p.Key + " " + label
	}
	if p.Type == "cohort" {
		return label + " " + p.Value
	}
	s := p.Key + " " + label + " " + p.Value
	if p.Negation {
		s = "not (" + s + ")"
	}
	return s
}

type rawFilters struct {
	Groups []struct {
		Properties []struct {
			Key      any    `json:"key"`
			Value    any    `json:"value"`
			Operator string `json:"operator"`
			Type     string `json:"type"`
			Negation bool   `json:"negation"`
		} `json:"properties"`
		RolloutPercentage *float64 `json:"rollout_percentage"`
		Variant           *string  `json:"variant"`
	} `json:"groups"`
	Multivariate *struct {
		Variants []struct {
			Key               string  `json:"key"`
			Name              string  `json:"name"`
			RolloutPercentage float64 `json:"rollout_percentage"`
		} `json:"variants"`
	} `json:"multivariate"`
	Payloads                  map[string]any `json:"payloads"`
	AggregationGroupTypeIndex *int           `json:"aggregation_group_type_index"`
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// payloadText is a stored payload as the form edits it: a JSON string's content, else JSON.
func payloadText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// parseFilterForm reads a flag's filters into the form's model.
func parseFilterForm(raw json.RawMessage) (*filterForm, error) {
	f := &filterForm{}
	if len(raw) == 0 {
		return f, nil
	}
	if err := json.Unmarshal(raw, &f.rest); err != nil {
		return nil, err
	}
	var r rawFilters
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	for _, k := range []string{"groups", "multivariate", "payloads", "aggregation_group_type_index"} {
		delete(f.rest, k)
	}
	for _, g := range r.Groups {
		c := conditionForm{}
		if g.RolloutPercentage != nil {
			c.Rollout = formatNumber(*g.RolloutPercentage)
		}
		if g.Variant != nil {
			c.Variant = *g.Variant
		}
		for _, p := range g.Properties {
			pf := propertyForm{Key: jsonText(p.Key), Operator: p.Operator, Type: p.Type, Negation: p.Negation}
			if pf.Operator == "" {
				pf.Operator = "exact"
			}
			if pf.Type == "" {
				pf.Type = "person"
			}
			switch v := p.Value.(type) {
			case []any:
				parts := make([]string, len(v))
				for i, x := range v {
					parts[i] = jsonText(x)
				}
				pf.Value = strings.Join(parts, ", ")
			case nil:
			default:
				pf.Value = jsonText(v)
			}
			if pf.Type == "cohort" {
				pf.Key = "id"
			}
			c.Properties = append(c.Properties, pf)
		}
		f.Conditions = append(f.Conditions, c)
	}
	if r.Multivariate != nil {
		for _, v := range r.Multivariate.Variants {
			vf := variantForm{Key: v.Key, Name: v.Name, Rollout: formatNumber(v.RolloutPercentage)}
			if p, ok := r.Payloads[v.Key]; ok {
				vf.Payload = payloadText(p)
			}
			f.Variants = append(f.Variants, vf)
		}
	}
	if p, ok := r.Payloads["true"]; ok {
		f.PayloadTrue = payloadText(p)
	}
	if r.AggregationGroupTypeIndex != nil {
		f.GroupTypeIndex = strconv.Itoa(*r.AggregationGroupTypeIndex)
	}
	return f, nil
}

// filterFormFrom reads the edit form's fields; blank property and variant rows are dropped.
func filterFormFrom(v url.Values, rest map[string]json.RawMessage) *filterForm {
	f := &filterForm{PayloadTrue: v.Get("payload_true"), GroupTypeIndex: v.Get("group_type"), rest: rest}
	nc, _ := strconv.Atoi(v.Get("cond_count"))
	for i := 0; i < min(nc, 50); i++ {
		pre := fmt.Sprintf("c%d_", i)
		c := conditionForm{Rollout: strings.TrimSpace(v.Get(pre + "rollout")), Variant: v.Get(pre + "variant")}
		np, _ := strconv.Atoi(v.Get(pre + "props"))
		for j := 0; j < min(np, 50); j++ {
			pp := fmt.Sprintf("%sp%d_", pre, j)
			p := propertyForm{Key: strings.TrimSpace(v.Get(pp + "key")), Operator: v.Get(pp + "op"), Value: strings.TrimSpace(v.Get(pp + "value")),
				Type: v.Get(pp + "type"), Negation: v.Get(pp+"negation") == "on"}
			if p.Type == "cohort" && p.Key == "" && p.Value != "" {
				p.Key = "id"
			}
			if p.Key == "" {
				continue
			}
			c.Properties = append(c.Properties, p)
		}
		f.Conditions = append(f.Conditions, c)
	}
	nv, _ := strconv.Atoi(v.Get("var_count"))
	for k := 0; k < min(nv, 50); k++ {
		pre := fmt.Sprintf("v%d_", k)
		vf := variantForm{Key: strings.TrimSpace(v.Get(pre + "key")), Name: v.Get(pre + "name"), Rollout: strings.TrimSpace(v.Get(pre + "pct")), Payload: v.Get(pre + "payload")}
		if vf.Key == "" && vf.Rollout == "" {
			continue
		}
		f.Variants = append(f.Variants, vf)
	}
	return f
}

// filters builds the API's filters object from the form.
func (f *filterForm) filters() (json.RawMessage, error) {
	out := map[string]any{}
	for k, v := range f.rest {
		out[k] = v
	}
	var gti *int
	if f.GroupTypeIndex != "" {
		i, err := strconv.Atoi(f.GroupTypeIndex)
		if err != nil {
			return nil, controlplane.FieldError("group_type", "invalid_input", "Choose a group type.")
		}
		gti = &i
	}
	out["aggregation_group_type_index"] = gti
	groups := []map[string]any{}
	for i, c := range f.Conditions {
		g := map[string]any{"properties": []any{}, "rollout_percentage": nil}
		if c.Rollout != "" {
			pct, err := strconv.ParseFloat(c.Rollout, 64)
			if err != nil || !(pct >= 0 && pct <= 100) { // NaN fails both
				return nil, controlplane.FieldError(fmt.Sprintf("c%d_rollout", i), "invalid_input", fmt.Sprintf("Condition %d: the rollout percentage must be a number from 0 to 100.", i+1))
			}
			g["rollout_percentage"] = pct
		}
		if c.Variant != "" {
			g["variant"] = c.Variant
		}
		props := []any{}
		for _, p := range c.Properties {
			props = append(props, p.filter(gti))
		}
		g["properties"] = props
		groups = append(groups, g)
	}
	out["groups"] = groups
	payloads := map[string]any{}
	if len(f.Variants) > 0 {
		var variants []any
		for k, v := range f.Variants {
			pct, err := strconv.ParseFloat(v.Rollout, 64)
			if err != nil || !(pct >= 0 && pct <= 100) {
				return nil, controlplane.FieldError(fmt.Sprintf("v%d_pct", k), "invalid_input", fmt.Sprintf("Variant %q: the percentage must be a number from 0 to 100.", v.Key))
			}
			variants = append(variants, map[string]any{"key": v.Key, "name": v.Name, "rollout_percentage": pct})
			if strings.TrimSpace(v.Payload) != "" {
				payloads[v.Key] = v.Payload
			}
		}
		out["multivariate"] = map[string]any{"variants": variants}
	} else {
		out["multivariate"] = nil
		if strings.TrimSpace(f.PayloadTrue) != "" {
			payloads["true"] = f.PayloadTrue
		}
	}
	out["payloads"] = payloads
	b, err := json.Marshal(out)
	return b, err
}

// filter is the API's property filter for the row.
func (p propertyForm) filter(gti *int) map[string]any {
	m := map[string]any{"key": p.Key, "operator": p.Operator, "type": p.Type}
	if p.Negation {
		m["negation"] = true
	}
	if p.Type == "person" && gti != nil {
		m["type"] = "group"
	}
	if m["type"] == "group" && gti != nil {
		m["group_type_index"] = *gti
	}
	switch {
	case p.Operator == "is_set" || p.Operator == "is_not_set":
		m["value"] = p.Operator
	case p.Type == "cohort":
		m["key"] = "id"
		if n, err := strconv.ParseInt(p.Value, 10, 64); err == nil {
			m["value"] = n
		} else {
			m["value"] = p.Value
		}
	case p.Type == "flag":
		switch p.Value {
		case "true":
			m["value"] = true
		case "false":
			m["value"] = false
		default:
			m["value"] = p.Value
		}
	case p.Operator == "exact" || p.Operator == "is_not":
		var list []string
		for _, s := range strings.Split(p.Value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		m["value"] = list
	default:
		m["value"] = p.Value
	}
	return m
}
