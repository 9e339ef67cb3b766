package flagsascode

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// Action is what a change does to an object.
type Action string

// The actions of a plan.
const (
	Create Action = "create"
	Update Action = "update"
	Delete Action = "delete"
)

// Kinds of object a plan changes.
const (
	KindCohort  = "cohort"
	KindFlag    = "flag"
	KindFeature = "early access feature"
)

// Change is one write of a plan.
type Change struct {
	Action Action
	Kind   string
	// Name is the flag's key, the cohort's or the feature's name.
	Name string
	// Diffs are the field-level differences, paths into the object ("filters.groups[0].
	// rollout_percentage"); for a creation, every field set.
	Diffs []Diff
	// fields are the top-level fields an update sends.
	fields []string
}

// Diff is one field's change: Old or New is absent (HasOld, HasNew false) when the field is
// added or removed.
type Diff struct {
	Path           string
	Old, New       any
	HasOld, HasNew bool
}

// Plan is the changes that make a project match a State, in the order Apply makes them:
// cohorts (those used first), flags (dependencies first), then deletions of flags (with
// prune) and early access features.
type Plan struct {
	Changes []Change
}

// Empty reports whether the project already matches.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 }

// Counts returns how many changes create, update and delete.
func (p *Plan) Counts() (create, update, del int) {
	for _, c := range p.Changes {
		switch c.Action {
		case Create:
			create++
		case Update:
			update++
		case Delete:
			del++
		}
	}
	return create, update, del
}

// Write prints the plan for review: one line per change, one per changed field under it.
func (p *Plan) Write(w io.Writer) error {
	var b strings.Builder
	for _, c := range p.Changes {
		b.WriteString(c.String())
	}
	create, update, del := p.Counts()
	if p.Empty() {
		b.WriteString("No changes: the project matches the file.\n")
	} else {
		fmt.Fprintf(&b, "Plan: %d to create, %d to change, %d to delete.\n", create, update, del)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String is the change as the plan prints it.
func (c Change) String() string {
	var b strings.Builder
	sign := map[Action]string{Create: "+", Update: "~", Delete: "-"}[c.Action]
	fmt.Fprintf(&b, "%s %s %q (%s)\n", sign, c.Kind, c.Name, c.Action)
	for _, d := range c.Diffs {
		switch {
		case !d.HasOld:
			fmt.Fprintf(&b, "    %s: %s\n", d.Path, show(d.New))
		case !d.HasNew:
			fmt.Fprintf(&b, "    %s: %s → (removed)\n", d.Path, show(d.Old))
		default:
			fmt.Fprintf(&b, "    %s: %s → %s\n", d.Path, show(d.Old), show(d.New))
		}
	}
	return b.String()
}

// show is a value as compact JSON.
func show(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// newPlan compares the desired State with the live project. With prune, flags and early
// access features the State lacks are deleted (flags softly); cohorts are never deleted, as
// the file holds only those its flags use.
func newPlan(want *State, l *live, prune bool) (*Plan, error) {
	for name := range want.Cohorts {
		if ids := l.ambiguousCohorts[name]; ids != nil {
			return nil, fmt.Errorf("the project has several cohorts named %q (%v): rename all but one", name, ids)
		}
	}
	for name := range want.Features {
		if l.ambiguousFeatures[name] > 0 {
			return nil, fmt.Errorf("the project has several early access features named %q: rename all but one", name)
		}
	}
	p := &Plan{}
	cohorts, err := cohortOrder(want)
	if err != nil {
		return nil, err
	}
	for _, name := range cohorts {
		p.add(KindCohort, name, cohortValues(want.Cohorts[name]), cohortValues(l.state.Cohorts[name]))
	}
	flags, err := flagOrder(want)
	if err != nil {
		return nil, err
	}
	for _, key := range flags {
		p.add(KindFlag, key, flagValues(want.Flags[key]), flagValues(l.state.Flags[key]))
	}
	if prune {
		for _, key := range sortedKeys(l.state.Flags) {
			if want.Flags[key] == nil {
				p.Changes = append(p.Changes, Change{Action: Delete, Kind: KindFlag, Name: key})
			}
		}
	}
	for _, name := range sortedKeys(want.Features) {
		w, have := want.Features[name], l.state.Features[name]
		if have != nil && have.Flag != w.Flag { // a feature's flag is set once: replace it
			p.Changes = append(p.Changes, Change{Action: Delete, Kind: KindFeature, Name: name,
				Diffs: []Diff{{Path: "flag", Old: have.Flag, New: w.Flag, HasOld: true, HasNew: true}}})
			have = nil
		}
		p.add(KindFeature, name, featureValues(w), featureValues(have))
	}
	if prune {
		for _, name := range sortedKeys(l.state.Features) {
			if want.Features[name] == nil {
				p.Changes = append(p.Changes, Change{Action: Delete, Kind: KindFeature, Name: name})
			}
		}
	}
	return p, nil
}

// add appends the change that makes have (nil: absent) want, if any.
func (p *Plan) add(kind, name string, want, have map[string]any) {
	c := Change{Kind: kind, Name: name, Action: Update}
	if have == nil {
		c.Action = Create
		for _, field := range sortedKeys(want) {
			c.Diffs = append(c.Diffs, Diff{Path: field, New: want[field], HasNew: true})
		}
		p.Changes = append(p.Changes, c)
		return
	}
	for _, field := range sortedKeys(want) {
		if reflect.DeepEqual(want[field], have[field]) {
			continue
		}
		c.fields = append(c.fields, field)
		c.Diffs = append(c.Diffs, diff(field, have[field], want[field])...)
	}
	if len(c.fields) > 0 {
		p.Changes = append(p.Changes, c)
	}
}

// diff lists the differences between old and new at path, descending into mappings and into
// lists of the same length.
func diff(path string, old, new any) []Diff {
	switch o := old.(type) {
	case map[string]any:
		if n, ok := new.(map[string]any); ok {
			keys := sortedKeys(o)
			for k := range n {
				if _, ok := o[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			var out []Diff
			for _, k := range keys {
				ov, hasOld := o[k]
				nv, hasNew := n[k]
				switch {
				case hasOld && hasNew:
					out = append(out, diff(path+"."+k, ov, nv)...)
				default:
					out = append(out, Diff{Path: path + "." + k, Old: ov, New: nv, HasOld: hasOld, HasNew: hasNew})
				}
			}
			return out
		}
	case []any:
		if n, ok := new.([]any); ok && len(n) == len(o) {
			var out []Diff
			for i := range o {
				out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), o[i], n[i])...)
			}
			return out
		}
	}
	if reflect.DeepEqual(old, new) {
		return nil
	}
	return []Diff{{Path: path, Old: old, New: new, HasOld: true, HasNew: true}}
}

// flagValues is a flag's fields as compared and written; nil for no flag.
func flagValues(f *Flag) map[string]any {
	if f == nil {
		return nil
	}
	return map[string]any{"name": f.Name, "active": f.Active, "filters": f.Filters, "tags": strs(sortedSet(f.Tags)),
		"evaluation_runtime": f.EvaluationRuntime, "evaluation_contexts": strs(sortedSet(f.EvaluationContexts)),
		"ensure_experience_continuity": f.EnsureExperienceContinuity, "bucketing_identifier": f.BucketingIdentifier}
}

// cohortValues is a cohort's fields as compared and written; its filters only when set (a
// static cohort's are not managed).
func cohortValues(c *Cohort) map[string]any {
	if c == nil {
		return nil
	}
	out := map[string]any{"description": c.Description, "is_static": c.IsStatic}
	if c.Filters != nil {
		out["filters"] = c.Filters
	}
	return out
}

// featureValues is a feature's fields as compared and written.
func featureValues(f *Feature) map[string]any {
	if f == nil {
		return nil
	}
	return map[string]any{"description": f.Description, "stage": f.Stage, "documentation_url": f.DocumentationURL, "flag": f.Flag}
}

// strs is a list of strings as a JSON list, so that it diffs element by element.
func strs(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// flagOrder is the State's flag keys with every flag after those it depends on.
func flagOrder(s *State) ([]string, error) {
	return dependencyOrder("flag", sortedKeys(s.Flags), func(key string) []string { return flagRefs(s.Flags[key].Filters) })
}

// cohortOrder is the State's cohort names with every cohort after those it uses.
func cohortOrder(s *State) ([]string, error) {
	return dependencyOrder("cohort", sortedKeys(s.Cohorts), func(name string) []string {
		var out []string
		for _, ref := range cohortRefs(s.Cohorts[name].Filters) {
			if n, ok := ref.(string); ok {
				out = append(out, n)
			}
		}
		return out
	})
}

// dependencyOrder sorts names (sorted) so that each comes after its dependencies among them,
// refusing a cycle.
func dependencyOrder(kind string, names []string, deps func(string) []string) ([]string, error) {
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string, path []string) error
	visit = func(n string, path []string) error {
		switch state[n] {
		case 1:
			i := slices.Index(path, n)
			return fmt.Errorf("circular %s dependency: %s", kind, strings.Join(append(slices.Clone(path[i:]), n), " → "))
		case 2:
			return nil
		}
		state[n] = 1
		for _, d := range deps(n) {
			if slices.Contains(names, d) {
				if err := visit(d, append(path, n)); err != nil {
					return err
				}
			}
		}
		state[n] = 2
		out = append(out, n)
		return nil
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}
