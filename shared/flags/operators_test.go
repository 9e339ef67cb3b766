package flags_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// now is the evaluation time of the operator tests: relative dates count back from it.
var now = time.Date(2024, time.March, 31, 12, 0, 0, 0, time.UTC)

// matches compiles a one-condition flag with the given filter and reports whether it is
// enabled for a person with the given properties.
func matches(t *testing.T, filter map[string]any, props flags.Properties) bool {
	t.Helper()
	if _, ok := filter["type"]; !ok {
		filter["type"] = "person"
	}
	raw, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"properties": []any{filter}}}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := flags.Compile(flags.Project{Flags: []flags.FlagDefinition{{ID: 1, Key: "f", Active: true, Filters: raw}}})
	if err != nil {
		t.Fatalf("compile %s: %v", raw, err)
	}
	return snap.Evaluate(&flags.Request{DistinctID: "u", PersonProperties: props, Now: now}, nil)[0].Enabled
}

type operatorCase struct {
	value  any // the filter's value
	person any // the person's property; missing when absent
	want   bool
}

var absent = struct{}{}

func runOperatorCases(t *testing.T, op string, cases []operatorCase) {
	t.Helper()
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s/%d/%v~%v", op, i, c.value, c.person), func(t *testing.T) {
			props := flags.Properties{}
			if c.person != absent {
				props["p"] = c.person
			}
			if got := matches(t, map[string]any{"key": "p", "operator": op, "value": c.value}, props); got != c.want {
				t.Errorf("%s %v against %v (%T): got %v, want %v", op, c.value, c.person, c.person, got, c.want)
			}
			negated := matches(t, map[string]any{"key": "p", "operator": op, "value": c.value, "negation": true}, props)
			if negated == c.want {
				t.Errorf("negation did not invert: %v", negated)
			}
		})
	}
}

func TestOperatorExact(t *testing.T) {
	runOperatorCases(t, "exact", []operatorCase{
		{"pro", "pro", true},
		{"pro", "PRO", true},
		{"pro", "free", false},
		{"pro", absent, false},
		{"pro", nil, false},
		{[]any{"pro", "team"}, "Team", true},
		{[]any{"pro", "team"}, "free", false},
		{5, 5.0, true},
		{5, "5", true},
		{"5", 5.0, true},
		{2.5, "2.5", true},
		{true, true, true},
		{true, "true", true},
		{"true", true, true},
		{"TRUE", false, false},
		{false, false, true},
		{true, "yes", false},
		{[]any{true, false}, false, true},
		{"pro", []any{"free", "PRO"}, false}, // the server compares a list property as its JSON text
		{"pro", map[string]any{"a": 1}, false},
	})
	runOperatorCases(t, "is_not", []operatorCase{
		{"pro", "free", true},
		{"pro", "Pro", false},
		{"pro", absent, true},
		{[]any{"a", "b"}, "c", true},
		{[]any{"a", "b"}, "B", false},
		{true, false, true},
	})
}

func TestOperatorSet(t *testing.T) {
	runOperatorCases(t, "is_set", []operatorCase{
		{nil, "x", true}, {nil, 0.0, true}, {nil, false, true}, {nil, absent, false}, {nil, nil, true}, // a property set to null is set
	})
	runOperatorCases(t, "is_not_set", []operatorCase{
		{nil, "x", false}, {nil, absent, true}, {nil, nil, false},
	})
}

func TestOperatorStrings(t *testing.T) {
	runOperatorCases(t, "icontains", []operatorCase{
		{"EXAMPLE", "bob@example.com", true}, {"exa", "Bob@EXAMPLE.com", true}, {"x", "abc", false},
		{"x", absent, false}, {"1", 21.0, true}, {"é", "CAFÉ", false} /* ASCII-only case folding, as the server */, {"", "anything", true},
	})
	runOperatorCases(t, "not_icontains", []operatorCase{
		{"example", "bob@example.com", false}, {"x", "abc", true}, {"x", absent, true},
	})
	runOperatorCases(t, "starts_with", []operatorCase{
		{"Bob", "bob@x", true}, {"bob", "alice", false}, {"b", absent, false}, {"long prefix", "lo", false},
	})
	runOperatorCases(t, "not_starts_with", []operatorCase{{"bob", "alice", true}, {"bob", "Bobby", false}, {"b", absent, true}})
	runOperatorCases(t, "ends_with", []operatorCase{{".COM", "a@b.com", true}, {".io", "a@b.com", false}, {"x", absent, false}})
	runOperatorCases(t, "not_ends_with", []operatorCase{{".io", "a@b.com", true}, {".com", "a@b.COM", false}, {"x", absent, true}})
}

func TestOperatorRegex(t *testing.T) {
	runOperatorCases(t, "regex", []operatorCase{
		{`^user\d+@`, "user42@x", true}, {`^user\d+@`, "User42@x", false}, {`(?i)^user`, "USER", true},
		{`\d`, 7.0, true}, {`x`, absent, false}, {`^true$`, true, true},
	})
	runOperatorCases(t, "not_regex", []operatorCase{
		{`^user\d+@`, "user42@x", false}, {`^user`, "admin", true}, {`x`, absent, true},
	})
}

func TestOperatorOrdering(t *testing.T) {
	runOperatorCases(t, "gt", []operatorCase{
		{10, 11.0, true}, {10, 10.0, false}, {10, "11", true}, {"10", 9.0, false}, {"10", "9", false},
		{"b", "c", false} /* the server compares numbers only */, {"b", "a", false}, {10, absent, false}, {10, "eleven", false}, {1.5, 1.6, true},
	})
	runOperatorCases(t, "gte", []operatorCase{{10, 10.0, true}, {10, 9.9, false}})
	runOperatorCases(t, "lt", []operatorCase{{10, 9.0, true}, {10, 10.0, false}, {"100", "20", true}, {10, absent, false}})
	runOperatorCases(t, "lte", []operatorCase{{10, 10.0, true}, {10, 10.5, false}})
}

func TestOperatorDates(t *testing.T) {
	runOperatorCases(t, "is_date_before", []operatorCase{
		{"2024-01-01", "2023-12-31T23:59:59Z", true},
		{"2024-01-01", "2024-01-01T00:00:01Z", false},
		{"2024-01-01T00:00:00+02:00", "2023-12-31T23:00:00Z", false},
		{"-30d", "2024-02-29T11:00:00Z", true},
		{"-30d", "2024-03-02T00:00:00Z", false},
		{"-1m", "2024-02-28T00:00:00Z", true}, // Mar 31 minus a month is Feb 29, not Mar 2
		{"-1m", "2024-03-01T00:00:00Z", false},
		{"-1y", "2023-03-30T00:00:00Z", true},
		{"-2w", "2024-03-16T00:00:00Z", true},
		{"-6h", "2024-03-31T05:00:00Z", true},
		{"-6h", "2024-03-31T07:00:00Z", false},
		{"2024-01-01", 1704067199.0, true}, // epoch seconds
		{"2024-01-01", "1704067201", false},
		{"2024-01-01", "not a date", false},
		{"2024-01-01", absent, false},
	})
	runOperatorCases(t, "is_date_after", []operatorCase{
		{"2024-01-01", "2024-01-02", true}, {"-7d", "2024-03-30T00:00:00Z", true}, {"-7d", "2024-03-01", false},
		{"2024-01-01", true, false},
	})
	runOperatorCases(t, "is_date_exact", []operatorCase{
		{"2024-01-15", "2024-01-15T18:30:00Z", false} /* instants, not days */, {"2024-01-15", "2024-01-16T00:00:00Z", false},
		{"2024-01-15T10:00:00Z", "2024-01-15T12:00:00+02:00", true},
	})
}

func TestOperatorSemver(t *testing.T) {
	runOperatorCases(t, "semver_eq", []operatorCase{
		{"1.2.3", "1.2.3", true}, {"1.2.3", "v1.2.3-beta+7", false} /* a pre-release is below its release */, {"1.2", "1.2.0", true}, {"1.2.3", "1.2.4", false},
		{"1.2.3", "garbage", false}, {"1.2.3", absent, false}, {"1.2.3", "1.2.3.9", false}, {"1.2.3", "01.2.3", true}, /* four parts are no version; leading zeros are dropped */
	})
	runOperatorCases(t, "semver_neq", []operatorCase{{"1.2.3", "1.2.4", true}, {"1.2.3", "1.2.3", false}, {"1.0.0", absent, false}})
	// The largest part is math.MaxInt64; one more is not a version.
	runOperatorCases(t, "semver_gt", []operatorCase{{"1.0.0", "9223372036854775807", true}, {"1.0.0", "9223372036854775808", true}, /* parts are 64-bit unsigned */
		{"1.0.0", "1.92233720368547758070", false}})
	runOperatorCases(t, "semver_gt", []operatorCase{{"1.2.3", "1.10.0", true}, {"1.2.3", "1.2.3", false}, {"1.2.3", "0.9", false}})
	runOperatorCases(t, "semver_gte", []operatorCase{{"1.2.3", "1.2.3", true}, {"2.0.0", "1.99.99", false}})
	runOperatorCases(t, "semver_lt", []operatorCase{{"1.2.3", "1.2.2", true}, {"1.2.3", "1.2.3", false}})
	runOperatorCases(t, "semver_lte", []operatorCase{{"1.2.3", "1.2.3", true}, {"1.2.3", "2", false}})
	runOperatorCases(t, "semver_tilde", []operatorCase{{"1.2.3", "1.2.9", true}, {"1.2.3", "1.3.0", false}, {"1.2.3", "1.2.2", false}})
	runOperatorCases(t, "semver_caret", []operatorCase{
		{"1.2.3", "1.9.0", true}, {"1.2.3", "2.0.0", false}, {"0.2.3", "0.2.9", true}, {"0.2.3", "0.3.0", false},
		{"0.0.3", "0.0.3", true}, {"0.0.3", "0.0.4", false},
	})
	runOperatorCases(t, "semver_wildcard", []operatorCase{
		{"1.2.*", "1.2.99", true}, {"1.2.*", "1.3.0", false}, {"1.*", "1.99.0", true}, {"1.*", "2.0.0", false},
	})
}

func TestDistinctIDProperty(t *testing.T) {
	// distinct_id is the request's unless the request's properties name another, as the
	// server (its stored distinct_id under the request's properties) and every SDK do.
	if !matches(t, map[string]any{"key": "distinct_id", "operator": "exact", "value": "u"}, nil) {
		t.Error("distinct_id did not come from the request")
	}
	if !matches(t, map[string]any{"key": "distinct_id", "operator": "exact", "value": "other"}, flags.Properties{"distinct_id": "other"}) {
		t.Error("the request's distinct_id property did not win")
	}
}
