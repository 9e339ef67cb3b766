package flags_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/shared/flags"
)

// TestHashedPairsMatchCryptoSHA1 evaluates projects with many flags that may need their
// rollout hash (hashed with a partner), in an evaluation order other than the key order (dependencies on
// flags with later keys), mixed with flags whose subject is not the distinct id (group,
// continuity with overrides, device bucketing, holdouts, super conditions, multivariate),
// for distinct ids around the 55-byte limit of a block, and compares every answer with
// the crypto/sha1 path.
func TestHashedPairsMatchCryptoSHA1(t *testing.T) {
	kinds := []string{
		`{"groups": [{"rollout_percentage": %d}]}`, // sure
		`{"groups": [{"properties": [{"key": "plan", "value": "pro", "operator": "exact"}], "rollout_percentage": %d}]}`, // may
		`{"groups": [{"properties": [{"key": "plan", "value": "free", "operator": "exact"}], "rollout_percentage": %d}, {"rollout_percentage": 40}]}`,
		`{"groups": [{"rollout_percentage": %d}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]}}`,
		`{"groups": [{"properties": [{"key": "plan", "value": "pro", "operator": "exact"}], "rollout_percentage": %d}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 30}, {"key": "b", "rollout_percentage": 70}]}}`,
		`{"aggregation_group_type_index": 0, "groups": [{"rollout_percentage": %d}]}`,
		`{"groups": [{"rollout_percentage": %d, "bucketing_identifier": "device_id"}]}`,
		`{"groups": [{"properties": [{"key": "plan", "value": "pro", "operator": "exact"}], "rollout_percentage": %d}], "holdout_groups": [{"rollout_percentage": 20, "variant": "h"}]}`,
		`{"groups": [{"rollout_percentage": %d}], "super_groups": [{"properties": [{"key": "$feature_enrollment/x", "value": ["true"]}]}]}`,
		`{"groups": [{"properties": [{"key": "plan", "value": "pro", "operator": "exact"}, {"key": "%s", "value": true, "operator": "flag_evaluates_to", "type": "flag"}], "rollout_percentage": %d}]}`,
	}
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		project := flags.Project{GroupTypes: map[int]string{0: "company"}}
		const n = 150
		for i := range n {
			key := fmt.Sprintf("f%03d-%s", i, strings.Repeat("k", rng.IntN(40)))
			k := rng.IntN(len(kinds))
			if i < 100 && rng.IntN(2) == 0 {
				k = rng.IntN(3) // plenty of candidates for hashed
			}
			var filters string
			if k == len(kinds)-1 {
				filters = fmt.Sprintf(kinds[k], fmt.Sprintf("f%03d", n), rng.IntN(100)) // the dependency is set below
			} else {
				filters = fmt.Sprintf(kinds[k], rng.IntN(100))
			}
			project.Flags = append(project.Flags, flags.FlagDefinition{ID: int64(i + 1), Key: key, Active: rng.IntN(15) != 0,
				EnsureExperienceContinuity: rng.IntN(8) == 0, Filters: json.RawMessage(filters)})
		}
		// Flag filters name a flag with a later key: the evaluation order is not the key order.
		for i := range project.Flags {
			f := &project.Flags[i]
			if strings.Contains(string(f.Filters), "flag_evaluates_to") {
				dep := project.Flags[min(n-1, i+1+rng.IntN(20))].Key
				f.Filters = json.RawMessage(strings.Replace(string(f.Filters), fmt.Sprintf("f%03d", n), dep, 1))
			}
		}
		snap, err := flags.Compile(project)
		if err != nil {
			t.Fatal(err)
		}
		hashed, partnered := flags.HashedFlags(snap)
		if seed == 1 {
			t.Logf("hashed %d, with a partner %d", hashed, partnered)
		}
		if hashed < 64 || partnered != hashed-1 {
			t.Fatalf("seed %d: %d hashed flags, %d with a partner; want the test to have more than 64, all but the last partnered", seed, hashed, partnered)
		}
		var with, without []flags.Result
		for u := range 300 {
			req := flags.Request{DistinctID: strings.Repeat("u", rng.IntN(60)) + fmt.Sprint(u),
				Groups:           map[string]string{"company": fmt.Sprint("c", u%7)},
				PersonProperties: flags.Properties{"plan": []string{"pro", "free"}[rng.IntN(2)]}}
			if rng.IntN(2) == 0 {
				req.DeviceID = fmt.Sprint("dev-", u)
			}
			if rng.IntN(3) == 0 {
				req.PersonProperties["$feature_enrollment/x"] = true
			}
			req.HashKeyOverrides = map[string]string{}
			for _, f := range project.Flags {
				if f.EnsureExperienceContinuity && rng.IntN(2) == 0 {
					req.HashKeyOverrides[f.Key] = fmt.Sprint("anon-", u)
				}
			}
			with = snap.Evaluate(&req, with)
			restore := flags.UseSHABlocks(false)
			without = snap.Evaluate(&req, without)
			restore()
			for i := range with {
				a, b := with[i], without[i]
				if a.Enabled != b.Enabled || a.Variant != b.Variant || a.Reason != b.Reason || a.ConditionIndex != b.ConditionIndex {
					t.Fatalf("seed %d user %q flag %s: %+v with blocks, %+v without", seed, req.DistinctID, a.Key, a, b)
				}
			}
		}
	}
}

// TestEveryHashedFlagHasAPartner: however many flags may need their rollout hash (here 140,
// more than the 64 places the engine once had), each but the last in evaluation order is
// hashed with the next; the others (multivariate flags with properties, group flags) are
// not on the list.
func TestEveryHashedFlagHasAPartner(t *testing.T) {
	var p flags.Project
	p.GroupTypes = map[int]string{0: "company"}
	add := func(key, filters string) {
		p.Flags = append(p.Flags, flags.FlagDefinition{ID: int64(len(p.Flags) + 1), Key: key, Active: true, Filters: json.RawMessage(filters)})
	}
	for i := range 100 {
		add(fmt.Sprintf("a-%03d", i), `{"groups": [{"properties": [{"key": "plan", "value": "pro", "operator": "exact"}], "rollout_percentage": 50}]}`)
	}
	for i := range 40 {
		add(fmt.Sprintf("b-%03d", i), `{"groups": [{"rollout_percentage": 30}]}`)
	}
	add("c-multivariate", `{"groups": [{"properties": [{"key": "plan", "value": "pro", "operator": "exact"}], "rollout_percentage": 50}],
		"multivariate": {"variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]}}`)
	add("d-group", `{"aggregation_group_type_index": 0, "groups": [{"rollout_percentage": 30}]}`)
	add("e-everyone", `{"groups": [{"rollout_percentage": 100}]}`)
	snap, err := flags.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if hashed, partnered := flags.HashedFlags(snap); hashed != 140 || partnered != 139 {
		t.Errorf("%d hashed flags, %d with a partner; want 140 and 139", hashed, partnered)
	}
}
