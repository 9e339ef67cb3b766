package personview_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flagedge/flagedge/controlplane/personview"
)

func ev(name, distinctID string, props map[string]any) personview.Event {
	raw, _ := json.Marshal(props)
	return personview.Event{Name: name, DistinctID: distinctID, Properties: raw}
}

// stored adds a stored person with the given distinct ids to the view.
func stored(v *personview.View, id int64, props map[string]any, distinctIDs ...string) *personview.Person {
	p := &personview.Person{ID: id, Properties: props, DistinctIDs: distinctIDs}
	for _, d := range distinctIDs {
		v.ByDistinctID[d] = p
	}
	return p
}

func TestIdentifyMergesAndIdentifiedWins(t *testing.T) {
	v := personview.NewView()
	anon := stored(v, 1, map[string]any{"plan": "free", "first_seen": "monday"}, "anon-1", "anon-1b")
	user := stored(v, 2, map[string]any{"plan": "pro"}, "user@example.com")
	v.Apply(ev("$identify", "user@example.com", map[string]any{"$anon_distinct_id": "anon-1", "$set": map[string]any{"name": "Ann"}}))
	if anon.MergedInto != user || len(v.Merged) != 1 {
		t.Fatalf("anon not merged into the identified person: %+v", v.Merged)
	}
	want := map[string]any{"plan": "pro", "first_seen": "monday", "name": "Ann"}
	if diff := cmp.Diff(want, user.Properties); diff != "" || !user.Identified || !user.Dirty {
		t.Errorf("survivor (-want +got):\n%s identified=%v", diff, user.Identified)
	}
	for _, d := range []string{"anon-1", "anon-1b", "user@example.com"} {
		if v.ByDistinctID[d] != user {
			t.Errorf("%s does not point at the survivor", d)
		}
	}
	// Identifying again is a no-op merge.
	v.Apply(ev("$identify", "user@example.com", map[string]any{"$anon_distinct_id": "anon-1b"}))
	if len(v.Merged) != 1 {
		t.Error("a second identify merged again")
	}
}

func TestIdentifyWithUnknownAnonymousID(t *testing.T) {
	v := personview.NewView()
	user := stored(v, 5, map[string]any{}, "u")
	v.Apply(ev("$identify", "u", map[string]any{"$anon_distinct_id": "never-seen"}))
	if v.ByDistinctID["never-seen"] != user || len(v.Merged) != 0 {
		t.Error("the anonymous id did not join the person")
	}
}

func TestNewPersonMergedIntoStoredKeepsTheStoredRow(t *testing.T) {
	v := personview.NewView()
	old := stored(v, 9, map[string]any{"a": 1.0, "b": 1.0}, "alias-target")
	v.Apply(ev("$create_alias", "brand-new", map[string]any{"alias": "alias-target", "$set": map[string]any{"b": 2.0}}))
	survivor := v.ByDistinctID["brand-new"]
	if survivor != old || survivor.ID != 9 {
		t.Fatalf("survivor %+v, want the stored person 9", survivor)
	}
	if diff := cmp.Diff(map[string]any{"a": 1.0, "b": 2.0}, survivor.Properties); diff != "" {
		t.Error(diff)
	}
}

func TestSetSetOnceUnset(t *testing.T) {
	v := personview.NewView()
	p := stored(v, 1, map[string]any{"keep": "x", "gone": "y", "once": "first"}, "d")
	v.Apply(ev("$pageview", "d", map[string]any{"$set": map[string]any{"n": 1.0}, "$set_once": map[string]any{"once": "second", "new_once": true}, "$unset": []any{"gone"}}))
	want := map[string]any{"keep": "x", "once": "first", "new_once": true, "n": 1.0}
	if diff := cmp.Diff(want, p.Properties); diff != "" {
		t.Error(diff)
	}
	if !personview.NeedsState(ev("$pageview", "d", map[string]any{"$set": map[string]any{}})) || personview.NeedsState(ev("$pageview", "d", map[string]any{"x": 1})) {
		t.Error("NeedsState")
	}
}

func TestGroupIdentify(t *testing.T) {
	v := personview.NewView()
	v.GroupTypes["company"] = 0
	for _, typ := range []string{"company", "team", "org", "region", "cluster", "sixth"} {
		v.Apply(ev("$groupidentify", "d", map[string]any{"$group_type": typ, "$group_key": "k-" + typ, "$group_set": map[string]any{"name": typ}}))
	}
	v.Apply(ev("$groupidentify", "d", map[string]any{"$group_type": "company", "$group_key": "k-company", "$group_set": map[string]any{"seats": 3.0}}))
	if diff := cmp.Diff([]string{"team", "org", "region", "cluster"}, v.NewGroupTypes); diff != "" {
		t.Errorf("new group types (-want +got):\n%s", diff)
	}
	if v.Ignored != 1 {
		t.Errorf("ignored %d, want the sixth type", v.Ignored)
	}
	g := v.Groups[personview.GroupKey{TypeIndex: 0, Key: "k-company"}]
	if diff := cmp.Diff(map[string]any{"name": "company", "seats": 3.0}, g.Properties); diff != "" {
		t.Error(diff)
	}
	if v.GroupTypes["cluster"] != 4 {
		t.Errorf("indexes %v", v.GroupTypes)
	}
}
