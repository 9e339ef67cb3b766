package flags

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestHasherMatchesSum checks the reused SHA-1 state against sha1.Sum for inputs of every
// length around the block boundaries, past the padded buffer (where it falls back) and with
// multi-byte characters.
func TestHasherMatchesSum(t *testing.T) {
	h := newHasher()
	if h.state == nil {
		t.Fatal("the SHA-1 state is not readable: every hash takes the slow path")
	}
	for n := range 300 {
		id := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		for _, c := range []struct {
			prefix string
			sep    bool
			salt   string
		}{{"flag-key", true, ""}, {"flag-key", true, "variant"}, {"holdout-", false, ""}, {"", false, ""}} {
			want := hashString(c.prefix, c.sep, id, c.salt)
			if got := h.hash(c.prefix, c.sep, id, c.salt); got != want {
				t.Fatalf("%q %v %d bytes %q: %v, sha1.Sum gives %v", c.prefix, c.sep, len(id), c.salt, got, want)
			}
		}
	}
}

// TestRolloutAndVariantHashes pins what the evaluation may skip or reuse: the variant is
// hashed even at a 100% rollout (which skips the rollout hash), a flag's rollout hash serves
// all its conditions, and a flag never sees the hash of the flag evaluated before it.
func TestRolloutAndVariantHashes(t *testing.T) {
	snap, err := Compile(Project{Flags: []FlagDefinition{
		{ID: 1, Key: "a-full", Active: true, Filters: json.RawMessage(`{"groups": [{"rollout_percentage": 100}],
			"multivariate": {"variants": [{"key": "x", "rollout_percentage": 50}, {"key": "y", "rollout_percentage": 50}]}}`)},
		{ID: 2, Key: "b-two", Active: true, Filters: json.RawMessage(`{"groups": [
			{"properties": [{"key": "plan", "value": "pro"}], "rollout_percentage": 30},
			{"properties": [{"key": "plan", "value": "free", "operator": "is_not"}], "rollout_percentage": 60}]}`)},
		{ID: 3, Key: "c-two", Active: true, Filters: json.RawMessage(`{"groups": [
			{"properties": [{"key": "plan", "value": "pro"}], "rollout_percentage": 30},
			{"properties": [{"key": "plan", "value": "free", "operator": "is_not"}], "rollout_percentage": 60}]}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var out []Result
	seen := map[string]int{}
	for i := range 400 {
		id := fmt.Sprintf("user-%d", i)
		plan := []string{"pro", "free", "team"}[i%3]
		out = snap.Evaluate(&Request{DistinctID: id, PersonProperties: Properties{"plan": plan}}, out)
		wantVariant := "y"
		if hashString("a-full", true, id, "variant") < 0.5 {
			wantVariant = "x"
		}
		if r := out[0]; !r.Enabled || r.Variant != wantVariant {
			t.Fatalf("%s: a-full is %v %q, want variant %q", id, r.Enabled, r.Variant, wantVariant)
		}
		seen[out[0].Variant]++
		for j, key := range []string{"b-two", "c-two"} {
			h := hashString(key, true, id, "")
			want := (plan == "pro" && h <= 0.3) || (plan != "free" && h <= 0.6)
			if r := out[1+j]; r.Enabled != want {
				t.Errorf("%s plan %s: %s is %v (%s), want %v (hash %.3f)", id, plan, key, r.Enabled, r.Reason, want, h)
			}
		}
	}
	if seen["x"] < 150 || seen["y"] < 150 {
		t.Errorf("variant split %v", seen)
	}
}
