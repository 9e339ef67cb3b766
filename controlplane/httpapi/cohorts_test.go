package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestStaticCohortMembers adds members to a static cohort by distinct id (persons created
// for unknown ones) and by person uuid, lists them page by page in PostHog's shape, removes
// one, and checks that a repeated add writes nothing, that the store's look-up (what edges
// ask) sees the memberships, and every refusal.
func TestStaticCohortMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cohorts := fmt.Sprintf("/api/projects/%d/cohorts/", e.project)
	static := int64(e.do("POST", cohorts, e.key, map[string]any{"name": "beta", "is_static": true}).body["id"].(float64))
	dynamic := int64(e.do("POST", cohorts, e.key, map[string]any{"name": "all"}).body["id"].(float64))
	add := func(id int64, body any) response {
		t.Helper()
		return e.do("PATCH", fmt.Sprintf("%s%d/add_persons_to_static_cohort/", cohorts, id), e.key, body)
	}
	version := func() int64 {
		t.Helper()
		var v int64
		if err := e.db.Pool.QueryRow(ctx, `SELECT snapshot_version FROM projects WHERE id = $1`, e.project).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	ids := []string{"u0", "u1", "u2", "u3", "u4"}
	before := version()
	r := add(static, map[string]any{"distinct_ids": append(ids, "u0")})
	if r.status != http.StatusOK {
		t.Fatalf("add: %d %s", r.status, r.raw)
	}
	want := map[string]any{"success": true, "persons_added": 5.0, "persons_created": 5.0, "unknown_person_ids": 0.0}
	if diff := cmp.Diff(want, r.body); diff != "" {
		t.Errorf("first add (-want +got):\n%s", diff)
	}
	if version() == before {
		t.Error("adding members did not re-stream the snapshot")
	}
	again := version()
	r = add(static, map[string]any{"distinct_ids": ids})
	want = map[string]any{"success": true, "persons_added": 0.0, "persons_created": 0.0, "unknown_person_ids": 0.0}
	if diff := cmp.Diff(want, r.body); diff != "" {
		t.Errorf("repeated add (-want +got):\n%s", diff)
	}
	if version() != again {
		t.Error("a repeated add re-streamed the snapshot")
	}

	// Pages of two, in PostHog's shape, every member once.
	var seen []string
	var u2 string
	next := fmt.Sprintf("%s%d/persons/?limit=2", cohorts, static)
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatal("more pages than members")
		}
		r := e.do("GET", strings.TrimPrefix(next, e.srv.URL), e.key, nil)
		if r.status != http.StatusOK || r.body["count"] != 5.0 {
			t.Fatalf("persons page: %d %s", r.status, r.raw)
		}
		for _, p := range r.body["results"].([]any) {
			p := p.(map[string]any)
			d := p["distinct_ids"].([]any)[0].(string)
			seen = append(seen, d)
			if d == "u2" {
				u2 = p["uuid"].(string)
			}
		}
		next, _ = r.body["next"].(string)
	}
	slices.Sort(seen)
	if diff := cmp.Diff(ids, seen); diff != "" {
		t.Errorf("members listed (-want +got):\n%s", diff)
	}

	// A person captured before, added by uuid: an edge's look-up of it names the cohort.
	other := add(static, map[string]any{"distinct_ids": []string{"someone"}})
	if other.status != http.StatusOK {
		t.Fatal(other.raw)
	}
	persons := postgres.NewPersonStore(e.db)
	p, err := persons.LookupPerson(ctx, e.project, "u3")
	if err != nil || p == nil || !slices.Contains(p.StaticCohortIDs, static) {
		t.Fatalf("look-up of a member: %+v %v", p, err)
	}

	// Removing takes the member out (the look-up no longer names the cohort); twice is a no-op.
	remove := func(body any) response {
		return e.do("PATCH", fmt.Sprintf("%s%d/remove_person_from_static_cohort/", cohorts, static), e.key, body)
	}
	for range 2 {
		if r := remove(map[string]any{"person_id": u2}); r.status != http.StatusOK || r.body["success"] != true {
			t.Fatalf("remove: %d %s", r.status, r.raw)
		}
	}
	if p, _ := persons.LookupPerson(ctx, e.project, "u2"); p == nil || slices.Contains(p.StaticCohortIDs, static) {
		t.Errorf("a removed member is still in the cohort: %+v", p)
	}
	r = add(static, map[string]any{"person_ids": []string{u2, uuid.NewString()}})
	want = map[string]any{"success": true, "persons_added": 1.0, "persons_created": 0.0, "unknown_person_ids": 1.0}
	if diff := cmp.Diff(want, r.body); diff != "" {
		t.Errorf("add by uuid (-want +got):\n%s", diff)
	}

	nobody := uuid.NewString()
	tooMany := make([]string, 10_001)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("d%d", i)
	}
	for _, c := range []struct {
		name       string
		res        response
		status     int
		code, attr string
	}{
		{"dynamic cohort", add(dynamic, map[string]any{"distinct_ids": []string{"u1"}}), 400, "invalid_input", "is_static"},
		{"nothing to add", add(static, map[string]any{}), 400, "required", "person_ids"},
		{"empty list", add(static, map[string]any{"person_ids": []string{}}), 400, "required", "person_ids"},
		{"not a list", add(static, map[string]any{"person_ids": "u1"}), 400, "invalid_input", "person_ids"},
		{"not strings", add(static, map[string]any{"distinct_ids": []int{1}}), 400, "invalid_input", "distinct_ids"},
		{"bad uuid", add(static, map[string]any{"person_ids": []string{"u1"}}), 400, "invalid_input", "person_ids"},
		{"empty distinct id", add(static, map[string]any{"distinct_ids": []string{""}}), 400, "invalid_input", "distinct_ids"},
		{"long distinct id", add(static, map[string]any{"distinct_ids": []string{strings.Repeat("x", 201)}}), 400, "invalid_input", "distinct_ids"},
		{"over the limit", add(static, map[string]any{"distinct_ids": tooMany}), 400, "max_length", "distinct_ids"},
		{"over the limit together", add(static, map[string]any{"person_ids": []string{uuid.NewString()}, "distinct_ids": tooMany[1:]}), 400, "max_length", "distinct_ids"},
		{"no valid person", add(static, map[string]any{"person_ids": []string{uuid.NewString()}}), 400, "invalid_input", "person_ids"},
		{"no valid person twice", add(static, map[string]any{"person_ids": []string{nobody, nobody}}), 400, "invalid_input", "person_ids"},
		{"unknown cohort", add(static+100, map[string]any{"distinct_ids": []string{"u1"}}), 404, "not_found", ""},
		{"remove without person", remove(map[string]any{}), 400, "required", "person_id"},
		{"remove bad uuid", remove(map[string]any{"person_id": "u1"}), 400, "invalid_input", "person_id"},
		{"remove unknown person", remove(map[string]any{"person_id": uuid.NewString()}), 404, "not_found", ""},
		{"list a dynamic cohort", e.do("GET", fmt.Sprintf("%s%d/persons/", cohorts, dynamic), e.key, nil), 400, "invalid_input", "is_static"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var attr any
			if c.attr != "" {
				attr = c.attr
			}
			typ := "validation_error"
			if c.status == 404 {
				typ = "invalid_request"
			}
			wantError(t, c.res, c.status, typ, c.code, attr)
		})
	}
	var members int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM cohort_people WHERE cohort_id = $1`, static).Scan(&members); err != nil || members != 6 {
		t.Errorf("the refusals changed the members: %d %v", members, err)
	}
}
