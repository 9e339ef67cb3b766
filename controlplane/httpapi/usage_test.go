package httpapi_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestFlagUsageAndStale reports the counts edges send (through the store the sync service
// writes to), per flag and per day, and finds the stale flags: old and never evaluated, or
// old, fully rolled out and unchanged.
func TestFlagUsageAndStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := time.Now().Add(-40 * 24 * time.Hour).UTC().Format(time.RFC3339)
	everyone := map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 100}}}
	half := map[string]any{"groups": []any{map[string]any{"properties": []any{}, "rollout_percentage": 50}}}
	ids := map[string]int64{}
	for key, body := range map[string]map[string]any{
		"old-unused": {"created_at": old, "filters": half},
		"old-used":   {"created_at": old, "filters": half},
		"old-full":   {"created_at": old, "filters": everyone},
		"new-unused": {"filters": half},
	} {
		body["key"] = key
		ids[key] = e.mustCreateFlag(body)
	}
	// old-full has not changed for 40 days.
	if _, err := e.db.Pool.Exec(context.Background(), `UPDATE feature_flags SET updated_at = now() - interval '40 days' WHERE id = $1`, ids["old-full"]); err != nil {
		t.Fatal(err)
	}
	store := postgres.NewEvaluationStore(e.db)
	err := store.AddEvaluations(context.Background(), []controlplane.EvaluationCount{
		{ProjectID: e.project, FlagKey: "old-used", Value: "true", Count: 5},
		{ProjectID: e.project, FlagKey: "old-used", Value: "false", Count: 2},
		{ProjectID: e.project, FlagKey: "old-used", Value: "true", Count: 3},
		{ProjectID: e.project, FlagKey: "old-full", Value: "true", Count: 1},
		{ProjectID: e.project + 1000, FlagKey: "old-used", Value: "true", Count: 1}, // no such project: dropped
	})
	if err != nil {
		t.Fatal(err)
	}

	used := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/", ids["old-used"])), e.key, nil)
	if diff := cmp.Diff(map[string]any{"1d": 10.0, "7d": 10.0, "30d": 10.0}, used.body["evaluation_counts"]); diff != "" {
		t.Errorf("evaluation counts (-want +got):\n%s", diff)
	}
	if last, err := time.Parse(time.RFC3339Nano, used.str("last_called_at")); err != nil || time.Since(last) > time.Minute {
		t.Errorf("last_called_at %q", used.str("last_called_at"))
	}
	if used.body["stale"] != false {
		t.Error("a flag evaluated today is stale")
	}
	unused := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/", ids["old-unused"])), e.key, nil)
	if unused.body["last_called_at"] != nil || unused.body["stale"] != true {
		t.Errorf("never evaluated: last_called_at %v, stale %v", unused.body["last_called_at"], unused.body["stale"])
	}

	stale := e.do("GET", e.flagsPath("/?stale=true"), e.key, nil)
	var keys []string
	for _, f := range stale.body["results"].([]any) {
		keys = append(keys, f.(map[string]any)["key"].(string))
	}
	sort.Strings(keys)
	if diff := cmp.Diff([]string{"old-full", "old-unused"}, keys); stale.status != 200 || diff != "" || stale.body["count"] != 2.0 {
		t.Errorf("?stale=true: %d count %v (-want +got):\n%s", stale.status, stale.body["count"], diff)
	}
	if r := e.do("GET", e.flagsPath("/?stale=maybe"), e.key, nil); r.status != 400 {
		t.Errorf("?stale=maybe: %d", r.status)
	}

	daily := e.do("GET", e.flagsPath(fmt.Sprintf("/%d/evaluations/", ids["old-used"])), e.key, nil)
	days := daily.body["results"].([]any)
	today := days[len(days)-1].(map[string]any)
	if len(days) != 30 || today["count"] != 10.0 || today["date"] != time.Now().UTC().Format(time.DateOnly) || days[0].(map[string]any)["count"] != 0.0 {
		t.Errorf("daily evaluations: %v", daily.body)
	}
}
