package flags_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// conformanceFile is one file of testdata/conformance: cases taken from PostHog's own tests
// (its server's first), each naming where it came from. A case is either one property filter
// against one person ("property", "person", "match": a one-condition flag that must be on or
// off) or whole flags against a request ("flags", "request", "expect").
type conformanceFile struct {
	Source string            `json:"source"`
	Cases  []conformanceCase `json:"cases"`
}

type conformanceCase struct {
	Name string          `json:"name"`
	From json.RawMessage `json:"from"`
	// EngineOnly says why a case holds for the engine but not through an edge (the e2e
	// replay skips it).
	EngineOnly string `json:"engine_only"`
	Now        string `json:"now"` // RFC 3339; default 2024-03-31T12:00:00Z

	Property map[string]any  `json:"property"`
	Person   json.RawMessage `json:"person"`
	Match    *bool           `json:"match"`

	Flags      []conformanceFlag          `json:"flags"`
	GroupTypes map[string]string          `json:"group_types"`
	Request    conformanceRequest         `json:"request"`
	Expect     map[string]conformanceWant `json:"expect"`
}

type conformanceFlag struct {
	ID         int64           `json:"id"`
	Key        string          `json:"key"`
	Filters    json.RawMessage `json:"filters"`
	Inactive   bool            `json:"inactive"`
	Continuity bool            `json:"ensure_experience_continuity"`
	Runtime    string          `json:"evaluation_runtime"`
	Tags       []string        `json:"evaluation_tags"`
	Bucketing  string          `json:"bucketing_identifier"`
}

type conformanceRequest struct {
	DistinctID       string                     `json:"distinct_id"`
	DeviceID         string                     `json:"device_id"`
	Groups           map[string]string          `json:"groups"`
	PersonProperties json.RawMessage            `json:"person_properties"`
	GroupProperties  map[string]json.RawMessage `json:"group_properties"`
	HashKeyOverrides map[string]string          `json:"hash_key_overrides"`
	StoredPerson     json.RawMessage            `json:"stored_person"`
	StoredGroups     map[string]json.RawMessage `json:"stored_groups"`
	// Which flags the request gets: evaluation_runtime (else told from the headers) and
	// evaluation_contexts (or its older name evaluation_environments).
	Runtime      *string           `json:"evaluation_runtime"`
	Contexts     []string          `json:"evaluation_contexts"`
	Environments []string          `json:"evaluation_environments"`
	Headers      map[string]string `json:"headers"`
}

// runtime is the request's runtime as the edge finds it.
func (r *conformanceRequest) runtime() flags.Runtime {
	if r.Runtime != nil {
		return flags.ParseRuntime(*r.Runtime)
	}
	var ua string
	browser := false
	for name, v := range r.Headers {
		switch strings.ToLower(name) {
		case "user-agent":
			ua = v
		case "origin", "referer", "sec-fetch-mode", "sec-fetch-site":
			browser = true
		}
	}
	return flags.DetectRuntime(ua, browser)
}

type conformanceWant struct {
	Value          any    `json:"value"`
	Reason         string `json:"reason"`
	ConditionIndex *int   `json:"condition_index"`
	// Absent says the flag is not in the answer (another runtime's, or tagged for other
	// evaluation contexts).
	Absent bool `json:"absent"`
}

// TestConformance runs the conformance corpus through the engine.
func TestConformance(t *testing.T) {
	files, err := filepath.Glob("testdata/conformance/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	total := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cf conformanceFile
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cf); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i, c := range cf.Cases {
			total++
			t.Run(fmt.Sprintf("%s/%d/%s", filepath.Base(file), i, c.Name), func(t *testing.T) { runConformance(t, c) })
		}
	}
	t.Logf("%d cases", total)
}

func props(t *testing.T, raw json.RawMessage) flags.Properties {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var p flags.Properties
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

func runConformance(t *testing.T, c conformanceCase) {
	if len(c.From) == 0 {
		t.Fatal("a case must say where it came from")
	}
	now := time.Date(2024, time.March, 31, 12, 0, 0, 0, time.UTC)
	if c.Now != "" {
		var err error
		if now, err = time.Parse(time.RFC3339Nano, c.Now); err != nil {
			t.Fatal(err)
		}
	}
	if c.Property != nil {
		if c.Match == nil {
			t.Fatal("a property case needs match")
		}
		if _, ok := c.Property["type"]; !ok {
			c.Property["type"] = "person"
		}
		filters, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"properties": []any{c.Property}}}})
		c.Flags = []conformanceFlag{{Key: "f", Filters: filters}}
		c.Request.DistinctID, c.Request.PersonProperties = "user", c.Person
		want := conformanceWant{Value: *c.Match}
		c.Expect = map[string]conformanceWant{"f": want}
	}
	project := flags.Project{GroupTypes: map[int]string{}}
	for i, f := range c.Flags {
		id := f.ID
		if id == 0 {
			id = int64(i + 1)
		}
		project.Flags = append(project.Flags, flags.FlagDefinition{ID: id, Key: f.Key, Active: !f.Inactive,
			EnsureExperienceContinuity: f.Continuity, Filters: f.Filters, EvaluationRuntime: f.Runtime, EvaluationTags: f.Tags,
			BucketingIdentifier: f.Bucketing})
	}
	for k, v := range c.GroupTypes {
		i, err := strconv.Atoi(k)
		if err != nil {
			t.Fatal(err)
		}
		project.GroupTypes[i] = v
	}
	snap, err := flags.Compile(project)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	req := &flags.Request{DistinctID: c.Request.DistinctID, DeviceID: c.Request.DeviceID, Groups: c.Request.Groups,
		PersonProperties: props(t, c.Request.PersonProperties), StoredPerson: props(t, c.Request.StoredPerson),
		HashKeyOverrides: c.Request.HashKeyOverrides, Now: now}
	if req.DistinctID == "" {
		req.DistinctID = "user"
	}
	for name, raw := range c.Request.GroupProperties {
		if req.GroupProperties == nil {
			req.GroupProperties = map[string]flags.Properties{}
		}
		req.GroupProperties[name] = props(t, raw)
	}
	for name, raw := range c.Request.StoredGroups {
		if req.StoredGroups == nil {
			req.StoredGroups = map[string]flags.Properties{}
		}
		req.StoredGroups[name] = props(t, raw)
	}
	rt, contexts := c.Request.runtime(), append(c.Request.Contexts, c.Request.Environments...)
	req.Selective, req.Runtime, req.EvaluationContexts = true, rt, contexts
	results := snap.Evaluate(req, nil)
	for key, want := range c.Expect {
		i := snap.Lookup(key)
		if i < 0 {
			t.Fatalf("no flag %q", key)
		}
		if selected := snap.Selected(i, rt, contexts); selected == want.Absent {
			t.Errorf("%s: selected %v for runtime %q and contexts %q, want %v", key, selected, rt, contexts, !want.Absent)
		}
		if want.Absent {
			if snap.Filters(rt, contexts) == false {
				t.Errorf("%s: Filters says no flag is left out", key)
			}
			continue
		}
		r := results[i]
		// Evaluating the one flag and its dependencies answers as evaluating them all.
		if one, _ := snap.EvaluateFlag(req, i, nil); !reflect.DeepEqual(one, r) {
			t.Errorf("%s: EvaluateFlag %+v, Evaluate %+v", key, one, r)
		}
		if got := r.Value(); got != want.Value {
			t.Errorf("%s: value %v (%s, condition %d), want %v", key, got, r.Reason, r.ConditionIndex, want.Value)
		}
		if want.Reason != "" && r.Reason.String() != want.Reason {
			t.Errorf("%s: reason %s, want %s", key, r.Reason, want.Reason)
		}
		if want.ConditionIndex != nil && r.ConditionIndex != *want.ConditionIndex {
			t.Errorf("%s: condition index %d, want %d", key, r.ConditionIndex, *want.ConditionIndex)
		}
	}
}
