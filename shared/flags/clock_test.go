package flags_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// Evaluate tells, through Request.Until, the first instant its date comparisons could come
// out otherwise: the meeting of a moving relative date with a fixed one, a window's start for
// months and years, and now when it cannot tell.
func TestEvaluateTellsUntil(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name     string
		operator string
		filter   string
		person   any
		want     time.Time // zero: left alone
	}{
		{"relative filter, days", "is_date_after", "-7d", now.Add(-5 * day).Format(time.RFC3339), now.Add(2 * day)},
		{"relative filter, met already", "is_date_after", "-7d", now.Add(-9 * day).Format(time.RFC3339), time.Time{}},
		{"relative filter, hours, before", "is_date_before", "-6h", now.Add(-time.Hour).Format(time.RFC3339), now.Add(5 * time.Hour)},
		{"relative filter, exact", "is_date_exact", "-1w", now.Add(-day).Format(time.RFC3339), now.Add(6 * day)},
		{"relative filter, months: the window's start", "is_date_after", "-1m", now.Add(-day).Format(time.RFC3339), now.Add(27 * day)},
		{"relative filter, inside the months' window", "is_date_after", "-1m", now.Add(-29 * day).Format(time.RFC3339), now},
		{"relative filter, years", "is_date_after", "-1y", now.Add(-day).Format(time.RFC3339), now.Add(364 * day)},
		{"relative person value", "is_date_before", now.Add(-3 * day).Format(time.RFC3339), "-1d", time.Time{}},
		{"relative person value, moving towards the filter", "is_date_before", now.Add(-day).Format(time.RFC3339), "-3d", now.Add(2 * day)},
		{"both relative, fixed spans", "is_date_after", "-7d", "-3d", time.Time{}},
		{"both relative, a calendar span", "is_date_after", "-1m", "-3d", now},
		{"both absolute", "is_date_after", "2026-01-01", "2026-02-01", time.Time{}},
		{"epoch seconds", "is_date_after", "-7d", float64(now.Add(-5 * day).Unix()), now.Add(2 * day)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			filters, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"properties": []any{
				map[string]any{"key": "signup", "operator": tc.operator, "value": tc.filter}}}}})
			snap, err := flags.Compile(flags.Project{Flags: []flags.FlagDefinition{{ID: 1, Key: "f", Active: true, Filters: filters}}})
			if err != nil {
				t.Fatal(err)
			}
			var until time.Time
			snap.Evaluate(&flags.Request{DistinctID: "u", PersonProperties: flags.Properties{"signup": tc.person}, Now: now, Until: &until}, nil)
			if !until.Equal(tc.want) {
				t.Errorf("until %v, want %v", until, tc.want)
			}
			if snap.TimeLimited() {
				t.Error("time limited without a backtracking pattern")
			}
		})
	}
}

// A snapshot with a pattern only a backtracking engine compiles is time limited; one with
// RE2 patterns is not.
func TestTimeLimited(t *testing.T) {
	for pattern, want := range map[string]bool{`^(?=.*@example)`: true, `@example\.com$`: false} {
		filters, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"properties": []any{
			map[string]any{"key": "email", "operator": "regex", "value": pattern}}}}})
		snap, err := flags.Compile(flags.Project{Flags: []flags.FlagDefinition{{ID: 1, Key: "f", Active: true, Filters: filters}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := snap.TimeLimited(); got != want {
			t.Errorf("%s: TimeLimited %v, want %v", pattern, got, want)
		}
	}
}
