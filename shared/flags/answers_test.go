package flags_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	cliflag "flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

var (
	updateAnswers = cliflag.Bool("update-answers", false, "write the digest of TestAnswersUnchanged's answers to testdata/answers.sha256")
	dumpAnswers   = cliflag.String("dump-answers", "", "write TestAnswersUnchanged's answers to this file, to compare engines line by line")
)

// TestAnswersUnchanged evaluates a broad random workload — the SDK parity projects plus super
// conditions, holdouts, static cohorts, group flags, hash key overrides, keys and ids long
// enough for two SHA-1 blocks, properties spread over the three layers, failed look-ups —
// and compares the digest of its 313,600 answers with testdata/answers.sha256, recorded
// from the engine before its optimisation. A change of the engine's speed or memory must not
// change one answer; one that means to runs -update-answers and says why. To find what
// changed, run both engines with -dump-answers and compare the files.
func TestAnswersUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("evaluates 313,600 flags")
	}
	sum := sha256.New()
	var w io.Writer = sum
	if *dumpAnswers != "" {
		f, err := os.Create(*dumpAnswers)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w = io.MultiWriter(sum, f)
	}
	writeAnswers(t, w)
	got := hex.EncodeToString(sum.Sum(nil))
	const golden = "testdata/answers.sha256"
	if *updateAnswers {
		if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != strings.TrimSpace(string(want)) {
		t.Errorf("the answers changed: digest %s, recorded %s", got, strings.TrimSpace(string(want)))
	}
}

// TestAnswersWithoutSHAExtensions gives the same answers through crypto/sha1 alone, as on a
// CPU without SHA extensions (where TestAnswersUnchanged itself runs that way).
func TestAnswersWithoutSHAExtensions(t *testing.T) {
	if testing.Short() {
		t.Skip("evaluates 313,600 flags twice")
	}
	with := sha256.New()
	writeAnswers(t, with)
	defer flags.UseSHABlocks(false)()
	without := sha256.New()
	writeAnswers(t, without)
	if a, b := hex.EncodeToString(with.Sum(nil)), hex.EncodeToString(without.Sum(nil)); a != b {
		t.Errorf("answers differ: digest %s with the SHA extensions, %s without", a, b)
	}
}

func writeAnswers(t *testing.T, w io.Writer) {
	now := time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)
	extra := []string{
		`{"groups": [{"rollout_percentage": 30}], "super_groups": [{"properties": [{"key": "$feature_enrollment/x", "value": ["true"]}]}], "holdout_groups": [{"rollout_percentage": 10, "variant": "holdout-1"}]}`,
		`{"groups": [{"rollout_percentage": 100}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 50}, {"key": "b", "rollout_percentage": 50}]}, "holdout_groups": [{"rollout_percentage": 60, "variant": "holdout-2"}]}`,
		`{"groups": [{"properties": [{"key": "id", "value": 9, "operator": "in", "type": "cohort"}], "rollout_percentage": 70}, {"properties": [{"key": "id", "value": 9, "operator": "not_in", "type": "cohort"}]}]}`,
		`{"aggregation_group_type_index": 0, "groups": [{"properties": [{"key": "$group_key", "value": "company-1", "operator": "is_not", "type": "group", "group_type_index": 0}, {"key": "plan", "value": "pro", "operator": "exact", "type": "group", "group_type_index": 0}], "rollout_percentage": 55}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 20}, {"key": "b", "rollout_percentage": 80}]}}`,
		`{"groups": [{"properties": [{"key": "distinct_id", "value": "user-1", "operator": "icontains"}], "rollout_percentage": 45}, {"properties": [{"key": "missing", "value": "x", "operator": "is_not"}], "rollout_percentage": 12.5}, {"properties": [{"key": "email", "value": "x", "operator": "not_icontains"}], "rollout_percentage": 99.99}]}`,
		`{"groups": [{"rollout_percentage": 0}, {"rollout_percentage": 0.01}]}`,
		`{"aggregation_group_type_index": 2, "groups": [{"rollout_percentage": 50}]}`,
		`{"groups": [{"rollout_percentage": 100, "variant": "b"}, {"rollout_percentage": 100}], "multivariate": {"variants": [{"key": "a", "rollout_percentage": 33.3}, {"key": "b", "rollout_percentage": 33.3}, {"key": "c", "rollout_percentage": 33.4}]}, "payloads": {"a": "1", "c": "{\"z\": [1]}"}}`,
	}
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*31))
		project, _ := randomProject(rng, 90)
		project.Cohorts = append(project.Cohorts, flags.CohortDefinition{ID: 9, Static: true})
		for i, filters := range extra {
			key := fmt.Sprintf("extra-%d", i)
			if i == 3 {
				key = strings.Repeat("k", 70) // a key long enough for two SHA-1 blocks
			}
			project.Flags = append(project.Flags, flags.FlagDefinition{ID: int64(1000 + i), Key: key, Active: true, Version: 2,
				EnsureExperienceContinuity: i%2 == 0, Filters: json.RawMessage(filters)})
		}
		project.GroupTypes[2] = "team"
		snap, err := flags.Compile(project)
		if err != nil {
			t.Fatal(err)
		}
		var out []flags.Result
		for u := range 400 {
			usr := randomUser(rng, u)
			req := flags.Request{DistinctID: usr.id, Groups: map[string]string{"company": usr.company}, Now: now}
			switch rng.IntN(6) {
			case 0:
				req.DistinctID = strings.Repeat("é", rng.IntN(120))
			case 1:
				req.DistinctID = fmt.Sprintf("%0*d", rng.IntN(260), u)
			}
			// Each property in one of the layers, shadowed by a nil override, or absent.
			req.PersonProperties, req.GeoIP, req.StoredPerson = flags.Properties{}, flags.Properties{}, flags.Properties{}
			keys := make([]string, 0, len(usr.props))
			for k := range usr.props {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				v := usr.props[k]
				switch rng.IntN(8) {
				case 0:
				case 1:
					req.GeoIP[k] = v
				case 2:
					req.StoredPerson[k] = v
				case 3:
					req.PersonProperties[k] = nil
					req.StoredPerson[k] = v
				default:
					req.PersonProperties[k] = v
				}
			}
			if rng.IntN(3) == 0 {
				req.PersonProperties["$feature_enrollment/x"] = rng.IntN(2) == 0
			}
			req.PersonLookupFailed = rng.IntN(5) == 0
			req.GroupLookupFailed = uint8(rng.IntN(8))
			if rng.IntN(2) == 0 {
				req.GroupProperties = map[string]flags.Properties{"company": usr.companyProps}
			} else {
				req.StoredGroups = map[string]flags.Properties{"company": usr.companyProps}
			}
			if rng.IntN(3) == 0 {
				req.Groups["team"] = fmt.Sprint("team-", rng.IntN(5))
			}
			if rng.IntN(4) == 0 {
				req.Groups = nil
			}
			if rng.IntN(3) == 0 {
				req.StaticCohorts = []int64{9}
			}
			if rng.IntN(3) == 0 {
				req.HashKeyOverrides = map[string]string{"extra-0": "anon-" + fmt.Sprint(u), "extra-2": ""}
			}
			out = snap.Evaluate(&req, out)
			for _, r := range out {
				fmt.Fprintf(w, "%d %d %s %v %v %v %s %s %d %v %q\n", seed, u, r.Key, r.ID, r.Version, r.Active, fmt.Sprint(r.Value()), r.Reason, r.ConditionIndex, r.Failed, r.Payload)
			}
		}
	}
}
