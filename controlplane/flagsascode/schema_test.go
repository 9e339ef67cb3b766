package flagsascode_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"
)

// schemaPath is the JSON Schema of the file that editors use.
const schemaPath = "../../docs/schema/flags.schema.json"

// mustSchema compiles the file's JSON Schema.
func mustSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("flags.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("flags.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validateYAML validates a YAML file against the schema, as an editor does.
func validateYAML(t *testing.T, s *jsonschema.Schema, file []byte) error {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(file, &v); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

// TestExportValidatesAgainstSchema checks that an exported file of every kind of flag is
// valid under docs/schema/flags.schema.json, and that the schema refuses what Parse refuses
// structurally (so it is no empty schema).
func TestExportValidatesAgainstSchema(t *testing.T) {
	schema := mustSchema(t)
	e := newEnv(t)
	e.seed()
	file := e.export()
	if err := validateYAML(t, schema, file); err != nil {
		t.Fatalf("the export is not valid under the schema: %v\n%s", err, file)
	}
	for name, bad := range map[string]string{
		"unknown field":   "flags:\n  f:\n    activ: true\n    filters: {groups: []}\n",
		"wrong type":      "flags:\n  f:\n    active: \"yes\"\n    filters: {groups: []}\n",
		"missing filters": "flags:\n  f:\n    name: x\n",
		"cohort by id":    "flags:\n  f:\n    filters: {groups: [{properties: [{key: id, type: cohort, value: 5}]}]}\n",
		"bad stage":       "early_access_features:\n  F: {stage: later, flag: f}\n",
		"bad version":     "version: 2\n",
	} {
		if validateYAML(t, schema, []byte(bad)) == nil {
			t.Errorf("%s: the schema accepts\n%s", name, bad)
		}
	}
}
