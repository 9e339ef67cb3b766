package flagsascode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/flagedge/flagedge/controlplane"
)

// FileVersion is the version of the file format this package reads and writes.
const FileVersion = 1

// header opens every exported file: what it is and where its schema is, for editors.
const header = `# Feature flags as code: "controlplane flags plan|apply -f FILE" makes a project match this file.
# Format: docs/flags-as-code.md; JSON Schema: docs/schema/flags.schema.json.
`

// Marshal writes s as the file: every mapping's keys sorted, so that exporting the same
// project twice gives the same bytes and a change is a small diff.
func Marshal(s *State) ([]byte, error) {
	flags := map[string]any{}
	for key, f := range s.Flags {
		m := map[string]any{
			"name": f.Name, "active": f.Active, "filters": f.Filters, "tags": sortedSet(f.Tags),
			"evaluation_runtime": f.EvaluationRuntime, "evaluation_contexts": sortedSet(f.EvaluationContexts),
			"ensure_experience_continuity": f.EnsureExperienceContinuity,
		}
		if f.BucketingIdentifier != "" {
			m["bucketing_identifier"] = f.BucketingIdentifier
		}
		flags[key] = m
	}
	cohorts := map[string]any{}
	for name, c := range s.Cohorts {
		m := map[string]any{"description": c.Description, "is_static": c.IsStatic}
		if c.Filters != nil {
			m["filters"] = c.Filters
		}
		cohorts[name] = m
	}
	features := map[string]any{}
	for name, f := range s.Features {
		features[name] = map[string]any{"description": f.Description, "stage": f.Stage,
			"documentation_url": f.DocumentationURL, "flag": f.Flag}
	}
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]any{"version": FileVersion, "flags": flags, "cohorts": cohorts,
		"early_access_features": features}); err != nil {
		return nil, fmt.Errorf("encode file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode file: %w", err)
	}
	return buf.Bytes(), nil
}

// FileError is one problem with a file: where it is and which field.
type FileError struct {
	File         string
	Line, Column int
	// Field is the path of the field, e.g. "flags.new-checkout.filters".
	Field string
	Msg   string
}

func (e *FileError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Field, e.Msg)
}

// maxErrors bounds how many problems Parse reports at once: a file that is wrong everywhere
// needs its first screenful fixed before the rest means anything.
const maxErrors = 50

// parser reads one file, collecting every problem it finds.
type parser struct {
	file string
	errs []error
	// refs are the cohort and flag references the filters make, checked once every section
	// is read (a flag may use a cohort defined further down).
	refs []reference
}

// reference is a cohort or flag named in filters.
type reference struct {
	node  *yaml.Node
	field string
	kind  string // typeCohort or typeFlag
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	if len(p.errs) < maxErrors {
		p.errs = append(p.errs, &FileError{File: p.file, Line: n.Line, Column: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
}

// Parse reads a file (name is only for messages). It checks everything before returning:
// unknown fields, wrong types, duplicate keys, filters the server would refuse (with the
// server's own validation), references to cohorts and flags the file does not define, and
// dependency cycles; every problem is a *FileError naming the line and the field, and they
// come joined, so that nothing is applied from a file with any.
func Parse(name string, data []byte) (*State, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &parser{file: name}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &FileError{File: name, Line: 1, Column: 1, Msg: "the file is empty"}
	}
	root := doc.Content[0]
	p.checkDuplicates(root, "")
	s := NewState()
	if len(p.errs) == 0 {
		p.readRoot(root, s)
		p.checkReferences(s)
	}
	if len(p.errs) == 0 {
		if _, err := flagOrder(s); err != nil {
			p.errs = append(p.errs, &FileError{File: name, Line: 1, Column: 1, Field: "flags", Msg: err.Error()})
		}
		if _, err := cohortOrder(s); err != nil {
			p.errs = append(p.errs, &FileError{File: name, Line: 1, Column: 1, Field: "cohorts", Msg: err.Error()})
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}

// checkDuplicates reports every mapping key that appears twice, at any depth, and every
// alias: a file is read by people, who should see each value where it applies.
func (p *parser) checkDuplicates(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.AliasNode:
		p.errorf(n, path, "aliases (*name) are not supported: write the value out")
	case yaml.MappingNode:
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if first, ok := seen[k.Value]; ok {
				p.errorf(k, join(path, k.Value), "duplicate key (first at line %d)", first.Line)
			} else {
				seen[k.Value] = k
			}
			p.checkDuplicates(n.Content[i+1], join(path, k.Value))
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			p.checkDuplicates(e, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fields calls fn for each key and value of mapping n, at path; a node that is not a mapping
// is reported. known lists the keys allowed; others are reported as unknown.
func (p *parser) fields(n *yaml.Node, path string, known []string, fn func(key string, v *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "must be a mapping, not %s", describe(n))
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if known != nil && !slices.Contains(known, k.Value) {
			p.errorf(k, join(path, k.Value), "unknown field (the fields are %s)", strings.Join(known, ", "))
			continue
		}
		fn(k.Value, v)
	}
	return true
}

// describe names a node's type for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!null":
		return "null"
	case "!!bool":
		return "the boolean " + n.Value
	case "!!int", "!!float":
		return "the number " + n.Value
	}
	return n.Value
}

func (p *parser) str(n *yaml.Node, path string, dst *string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.errorf(n, path, "must be a string, not %s", describe(n))
		return
	}
	*dst = n.Value
}

func (p *parser) boolean(n *yaml.Node, path string, dst *bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		p.errorf(n, path, "must be true or false, not %s", describe(n))
		return
	}
	*dst = n.Value == "true"
}

func (p *parser) strings(n *yaml.Node, path string, dst *[]string) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "must be a list of strings, not %s", describe(n))
		return
	}
	out := []string{}
	for i, e := range n.Content {
		var s string
		p.str(e, fmt.Sprintf("%s[%d]", path, i), &s)
		out = append(out, s)
	}
	*dst = out
}

// object reads a mapping as JSON values, and records the references it makes.
func (p *parser) object(n *yaml.Node, path string, dst *map[string]any) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "must be a mapping, not %s", describe(n))
		return
	}
	v, err := jsonValue(n)
	if err != nil {
		p.errorf(n, path, "%v", err)
		return
	}
	if _, err := json.Marshal(v); err != nil {
		p.errorf(n, path, "not representable in JSON: %v", err)
		return
	}
	*dst = v.(map[string]any)
	p.collectReferences(n, path)
}

// jsonValue is the JSON value a YAML node stands for. A timestamp stays the text written
// (2024-01-01 is a date string to the filters, not a time to reformat).
func jsonValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := jsonValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out[n.Content[i].Value] = v
		}
		return out, nil
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, e := range n.Content {
			v, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		return normalize(v), nil
	}
	return nil, fmt.Errorf("line %d: %s is not a JSON value", n.Line, describe(n))
}

// collectReferences records each cohort property's value and flag property's key under n.
func (p *parser) collectReferences(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.SequenceNode:
		for i, e := range n.Content {
			p.collectReferences(e, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.MappingNode:
		values := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			values[n.Content[i].Value] = n.Content[i+1]
			p.collectReferences(n.Content[i+1], join(path, n.Content[i].Value))
		}
		if t := values["type"]; t != nil && (t.Value == typeCohort || t.Value == typeFlag) {
			field := map[string]string{typeCohort: "value", typeFlag: "key"}[t.Value]
			if v := values[field]; v != nil {
				p.refs = append(p.refs, reference{node: v, field: join(path, field), kind: t.Value})
			} else {
				p.errorf(n, path, "a %s property needs a %s", t.Value, field)
			}
		}
	}
}

var (
	rootFields    = []string{"version", "flags", "cohorts", "early_access_features"}
	flagFields    = []string{"name", "active", "filters", "tags", "evaluation_runtime", "evaluation_contexts", "ensure_experience_continuity", "bucketing_identifier"}
	cohortFields  = []string{"description", "is_static", "filters"}
	featureFields = []string{"description", "stage", "documentation_url", "flag"}
)

func (p *parser) readRoot(root *yaml.Node, s *State) {
	p.fields(root, "", rootFields, func(key string, v *yaml.Node) {
		switch key {
		case "version":
			if v.ShortTag() != "!!int" || v.Value != strconv.Itoa(FileVersion) {
				p.errorf(v, "version", "must be %d, not %s", FileVersion, describe(v))
			}
		case "flags":
			p.section(v, "flags", func(name string, k, v *yaml.Node) { s.Flags[name] = p.readFlag(name, k, v) })
		case "cohorts":
			p.section(v, "cohorts", func(name string, k, v *yaml.Node) { s.Cohorts[name] = p.readCohort(name, v) })
		case "early_access_features":
			p.section(v, "early_access_features", func(name string, k, v *yaml.Node) { s.Features[name] = p.readFeature(name, k, v) })
		}
	})
}

// section reads a mapping of names to objects; null is an empty section.
func (p *parser) section(n *yaml.Node, path string, fn func(name string, k, v *yaml.Node)) {
	if n.ShortTag() == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "must be a mapping of names to objects, not %s", describe(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.errorf(k, path, "a name must be a non-empty string")
			continue
		}
		fn(k.Value, k, n.Content[i+1])
	}
}

func (p *parser) readFlag(key string, k, n *yaml.Node) *Flag {
	path := join("flags", key)
	f := &Flag{Active: true, EvaluationRuntime: "all", Tags: []string{}, EvaluationContexts: []string{}}
	nodes := map[string]*yaml.Node{}
	if !p.fields(n, path, flagFields, func(field string, v *yaml.Node) {
		nodes[field] = v
		switch fp := join(path, field); field {
		case "name":
			p.str(v, fp, &f.Name)
		case "active":
			p.boolean(v, fp, &f.Active)
		case "filters":
			p.object(v, fp, &f.Filters)
		case "tags":
			p.strings(v, fp, &f.Tags)
		case "evaluation_runtime":
			p.str(v, fp, &f.EvaluationRuntime)
		case "evaluation_contexts":
			p.strings(v, fp, &f.EvaluationContexts)
		case "ensure_experience_continuity":
			p.boolean(v, fp, &f.EnsureExperienceContinuity)
		case "bucketing_identifier":
			p.str(v, fp, &f.BucketingIdentifier)
		}
	}) {
		return f
	}
	if nodes["filters"] == nil {
		p.errorf(k, join(path, "filters"), "required: the flag's conditions")
		return f
	}
	if f.Filters == nil {
		return f // already reported
	}
	// The server's own checks, on the flag as it would be sent (cohort names stand in as
	// placeholder ids: that they exist is checked with the references).
	upd := flagUpdate(key, f, func(any) any { return 1 })
	if err := upd.Validate(true); err != nil {
		node, field := k, path
		var ce *controlplane.Error
		if errors.As(err, &ce) && ce.Attr != "" {
			attr := map[string]string{"evaluation_tags": "evaluation_contexts"}[ce.Attr]
			if attr == "" {
				attr = ce.Attr
			}
			if nodes[attr] != nil {
				node = nodes[attr]
			}
			field = join(path, attr)
			err = errors.New(ce.Detail)
		}
		p.errorf(node, field, "%v", err)
	}
	return f
}

func (p *parser) readCohort(name string, n *yaml.Node) *Cohort {
	path := join("cohorts", name)
	c := &Cohort{}
	p.fields(n, path, cohortFields, func(field string, v *yaml.Node) {
		switch fp := join(path, field); field {
		case "description":
			p.str(v, fp, &c.Description)
		case "is_static":
			p.boolean(v, fp, &c.IsStatic)
		case "filters":
			p.object(v, fp, &c.Filters)
			if c.Filters == nil {
				return
			}
			upd := controlplane.CohortUpdate{Filters: wireJSON(mapReferences(c.Filters, func(any) any { return 1 }, nil))}
			if err := upd.Validate(); err != nil {
				var ce *controlplane.Error
				if errors.As(err, &ce) {
					err = errors.New(ce.Detail)
				}
				p.errorf(v, fp, "%v", err)
			}
		}
	})
	return c
}

func (p *parser) readFeature(name string, k, n *yaml.Node) *Feature {
	path := join("early_access_features", name)
	f := &Feature{}
	nodes := map[string]*yaml.Node{}
	if !p.fields(n, path, featureFields, func(field string, v *yaml.Node) {
		nodes[field] = v
		switch fp := join(path, field); field {
		case "description":
			p.str(v, fp, &f.Description)
		case "stage":
			p.str(v, fp, &f.Stage)
		case "documentation_url":
			p.str(v, fp, &f.DocumentationURL)
		case "flag":
			p.str(v, fp, &f.Flag)
		}
	}) {
		return f
	}
	for _, required := range []string{"stage", "flag"} {
		if nodes[required] == nil {
			p.errorf(k, join(path, required), "required")
		}
	}
	if v := nodes["flag"]; v != nil {
		p.refs = append(p.refs, reference{node: v, field: join(path, "flag"), kind: typeFlag})
	}
	upd := controlplane.EarlyAccessFeatureUpdate{Name: &name, Description: &f.Description, Stage: &f.Stage, DocumentationURL: &f.DocumentationURL}
	if err := upd.Validate(true); err != nil {
		node, field := k, path
		var ce *controlplane.Error
		if errors.As(err, &ce) && ce.Attr != "" {
			if nodes[ce.Attr] != nil {
				node = nodes[ce.Attr]
			}
			field, err = join(path, ce.Attr), errors.New(ce.Detail)
		}
		p.errorf(node, field, "%v", err)
	}
	return f
}

// checkReferences reports filters naming a cohort or a flag the file does not define, and
// features linking a flag it does not define.
func (p *parser) checkReferences(s *State) {
	for _, r := range p.refs {
		switch {
		case r.node.Kind != yaml.ScalarNode || r.node.ShortTag() != "!!str":
			p.errorf(r.node, r.field, "must name a %s of the file (a string), not %s", r.kind, describe(r.node))
		case r.kind == typeCohort && s.Cohorts[r.node.Value] == nil:
			p.errorf(r.node, r.field, "unknown cohort %q: cohorts are named, and defined under cohorts:", r.node.Value)
		case r.kind == typeFlag && s.Flags[r.node.Value] == nil:
			p.errorf(r.node, r.field, "unknown flag %q: only flags of the file may be named", r.node.Value)
		}
	}
}

// flagUpdate is the API write that creates f as key, with cohort references mapped by cohort.
func flagUpdate(key string, f *Flag, cohort func(any) any) controlplane.FlagUpdate {
	tags, contexts := sortedSet(f.Tags), sortedSet(f.EvaluationContexts)
	return controlplane.FlagUpdate{Key: &key, Name: &f.Name, Active: &f.Active,
		Filters: wireJSON(mapReferences(f.Filters, cohort, nil)), Tags: &tags, EvaluationRuntime: &f.EvaluationRuntime,
		EvaluationTags: &contexts, EnsureExperienceContinuity: &f.EnsureExperienceContinuity,
		BucketingIdentifier: &f.BucketingIdentifier}
}

// wireJSON encodes a JSON value; the values here come from JSON or YAML and always encode.
func wireJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("flagsascode: a decoded value does not encode: %v", err))
	}
	return data
}
