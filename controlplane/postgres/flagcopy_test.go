package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// copyFixture is an organisation with a source project and targets to copy flags into.
type copyFixture struct {
	t      *testing.T
	ctx    context.Context
	db     *postgres.DB
	s      controlplane.Services
	admin  *controlplane.User
	org    int64
	source int64
}

func newCopyFixture(t *testing.T) *copyFixture {
	db, res, _ := mustOpen(t)
	admin := &mustKey(t, db, res.PersonalAPIKey).User
	return &copyFixture{t: t, ctx: controlplane.NewContextWithUser(context.Background(), admin), db: db,
		s: postgres.NewServices(db, bcrypt.MinCost), admin: admin, org: admin.OrganizationID, source: res.ProjectID}
}

func (fx *copyFixture) project(name string) int64 {
	p, err := fx.s.Projects.CreateProject(fx.ctx, fx.org, name)
	if err != nil {
		fx.t.Fatal(err)
	}
	return p.ID
}

func (fx *copyFixture) flag(ctx context.Context, project int64, key, filters string, active bool) *controlplane.Flag {
	fx.t.Helper()
	upd := controlplane.FlagUpdate{Key: &key, Active: &active}
	if filters != "" {
		upd.Filters = json.RawMessage(filters)
	}
	f, err := fx.s.Flags.CreateFlag(ctx, project, upd)
	if err != nil {
		fx.t.Fatal(err)
	}
	return f
}

func (fx *copyFixture) cohort(project int64, name, filters string, static bool) int64 {
	fx.t.Helper()
	upd := controlplane.CohortUpdate{Name: &name, IsStatic: &static}
	if filters != "" {
		upd.Filters = json.RawMessage(filters)
	}
	c, err := fx.s.Cohorts.CreateCohort(fx.ctx, project, upd)
	if err != nil {
		fx.t.Fatal(err)
	}
	return c.ID
}

// person stores a person of the project with the distinct ids.
func (fx *copyFixture) person(project int64, distinctIDs ...string) int64 {
	fx.t.Helper()
	var id int64
	if err := fx.db.Pool.QueryRow(fx.ctx, `INSERT INTO persons (project_id) VALUES ($1) RETURNING id`, project).Scan(&id); err != nil {
		fx.t.Fatal(err)
	}
	for _, d := range distinctIDs {
		if _, err := fx.db.Pool.Exec(fx.ctx, `INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) VALUES ($1, $2, $3)`,
			project, d, id); err != nil {
			fx.t.Fatal(err)
		}
	}
	return id
}

func (fx *copyFixture) member(cohort, person int64) {
	fx.t.Helper()
	if _, err := fx.db.Pool.Exec(fx.ctx, `INSERT INTO cohort_people (cohort_id, person_id) VALUES ($1, $2)`, cohort, person); err != nil {
		fx.t.Fatal(err)
	}
}

// members are the distinct ids of the static cohort's members, sorted.
func (fx *copyFixture) members(cohort int64) []string {
	fx.t.Helper()
	rows, err := fx.db.Pool.Query(fx.ctx, `SELECT d.distinct_id FROM cohort_people cp JOIN person_distinct_ids d ON d.person_id = cp.person_id
		WHERE cp.cohort_id = $1 ORDER BY 1`, cohort)
	if err != nil {
		fx.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			fx.t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// cohortByName is the project's cohort of the name.
func (fx *copyFixture) cohortByName(project int64, name string) *controlplane.Cohort {
	fx.t.Helper()
	list, _, err := fx.s.Cohorts.FindCohorts(fx.ctx, project, 100, 0)
	if err != nil {
		fx.t.Fatal(err)
	}
	var found []*controlplane.Cohort
	for _, c := range list {
		if c.Name == name {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		fx.t.Fatalf("project %d has %d cohorts named %q, want 1", project, len(found), name)
	}
	return found[0]
}

func (fx *copyFixture) flagByKey(project int64, key string) *controlplane.Flag {
	fx.t.Helper()
	list, _, err := fx.s.Flags.FindFlags(fx.ctx, controlplane.FlagFilter{ProjectID: project, Search: key, Limit: 100})
	if err != nil {
		fx.t.Fatal(err)
	}
	for _, f := range list {
		if f.Key == key {
			return f
		}
	}
	return nil
}

func (fx *copyFixture) copy(ctx context.Context, req controlplane.FlagCopyRequest) *controlplane.FlagCopyResult {
	fx.t.Helper()
	if req.SourceProjectID == 0 {
		req.SourceProjectID = fx.source
	}
	out, err := fx.s.FlagCopies.CreateFlagCopies(ctx, fx.org, req)
	if err != nil {
		fx.t.Fatal(err)
	}
	return out
}

func flagDep(id int64) string {
	return fmt.Sprintf(`{"key": "%d", "type": "flag", "value": true, "operator": "flag_evaluates_to"}`, id)
}

func cohortProp(id int64) string {
	return fmt.Sprintf(`{"key": "id", "type": "cohort", "value": %d}`, id)
}

// TestCopyFlagCarriesCohortsAndDependencies copies a flag that uses a nested cohort (over a
// static cohort with members and a property cohort) and depends on another flag, with its
// dependencies, into two projects and one of no organisation's: each target gets the cohorts
// (ids remapped, static members as the same distinct ids, a person the target already has
// reused), the dependency first, the flag naming the target's ids, its activity, and one
// snapshot bump; the unknown project fails alone.
func TestCopyFlagCarriesCohortsAndDependencies(t *testing.T) {
	t.Parallel()
	fx := newCopyFixture(t)
	beta := fx.cohort(fx.source, "beta", "", true)
	for _, d := range []string{"u1", "u2"} {
		fx.member(beta, fx.person(fx.source, d, d+"-device"))
	}
	fx.person(fx.source, "u3")
	paying := fx.cohort(fx.source, "paying", `{"properties": {"type": "AND", "values": [{"key": "plan", "type": "person", "operator": "exact", "value": "pro"}]}}`, false)
	either := fx.cohort(fx.source, "beta or paying", fmt.Sprintf(`{"properties": {"type": "OR", "values": [%s, %s]}}`, cohortProp(beta), cohortProp(paying)), false)
	base := fx.flag(fx.ctx, fx.source, "base", "", true)
	gate := fx.flag(fx.ctx, fx.source, "gate", fmt.Sprintf(`{"groups": [{"properties": [%s, %s], "rollout_percentage": 50}],
		"payloads": {"true": "{\"a\": 1}"}}`, cohortProp(either), flagDep(base.ID)), true)

	staging, prod := fx.project("staging"), fx.project("prod")
	known := fx.person(prod, "u1-device") // prod already knows one of u1's ids
	versions := map[int64]int64{staging: snapshotVersionOf(t, fx.db, staging), prod: snapshotVersionOf(t, fx.db, prod)}

	out := fx.copy(fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "gate", TargetProjectIDs: []int64{staging, 999999, prod},
		CopyDependencies: true})
	if len(out.Failed) != 1 || out.Failed[0].ProjectID != 999999 || out.Failed[0].ErrorMessage != "Project not found." {
		t.Errorf("failed = %+v, want project 999999 not found", out.Failed)
	}
	if len(out.Success) != 2 {
		t.Fatalf("success = %+v, want 2", out.Success)
	}
	for i, p := range []int64{staging, prod} {
		got := out.Success[i]
		if got.Flag.ProjectID != p || got.Flag.Key != "gate" || !got.Flag.Active || len(got.FlagDependencyWarnings) > 0 {
			t.Errorf("project %d: copy %+v", p, got)
		}
		if !slices.Equal(got.CopiedDependencyKeys, []string{"base"}) {
			t.Errorf("project %d: copied dependencies %v, want [base]", p, got.CopiedDependencyKeys)
		}
		if v := snapshotVersionOf(t, fx.db, p); v != versions[p]+1 || got.Flag.SnapshotVersion != v {
			t.Errorf("project %d: snapshot version %d (flag says %d), want one bump from %d", p, v, got.Flag.SnapshotVersion, versions[p])
		}
		tBeta, tPaying, tEither := fx.cohortByName(p, "beta"), fx.cohortByName(p, "paying"), fx.cohortByName(p, "beta or paying")
		if !tBeta.IsStatic || tPaying.IsStatic || tBeta.ID == beta || tEither.ID == either {
			t.Errorf("project %d: cohorts %+v %+v %+v", p, tBeta, tPaying, tEither)
		}
		if got := controlplane.CohortReferences(tEither.Filters); !slices.Equal(got, []int64{tBeta.ID, tPaying.ID}) {
			t.Errorf("project %d: nested cohort names %v, want [%d %d]", p, got, tBeta.ID, tPaying.ID)
		}
		if got := fx.members(tBeta.ID); !slices.Equal(got, []string{"u1", "u1-device", "u2", "u2-device"}) {
			t.Errorf("project %d: static members %v", p, got)
		}
		tBase := fx.flagByKey(p, "base")
		if tBase == nil || !tBase.Active {
			t.Fatalf("project %d: dependency %+v", p, tBase)
		}
		var filters struct {
			Groups []struct {
				Properties []struct {
					Key   string `json:"key"`
					Type  string `json:"type"`
					Value any    `json:"value"`
				} `json:"properties"`
			} `json:"groups"`
			Payloads map[string]string `json:"payloads"`
		}
		if err := json.Unmarshal(got.Flag.Filters, &filters); err != nil {
			t.Fatal(err)
		}
		props := filters.Groups[0].Properties
		if props[0].Value != float64(tEither.ID) || props[1].Key != strconv.FormatInt(tBase.ID, 10) || filters.Payloads["true"] != `{"a": 1}` {
			t.Errorf("project %d: filters %s (cohort %d, base %d)", p, got.Flag.Filters, tEither.ID, tBase.ID)
		}
		acts, _, err := fx.s.Activity.FindActivity(fx.ctx, controlplane.ActivityFilter{ProjectID: p, Scope: "FeatureFlag", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var created []string
		for _, a := range acts {
			if a.Activity == controlplane.ActivityCreated {
				created = append(created, a.Detail.Name)
			}
		}
		if slices.Sort(created); !slices.Equal(created, []string{"base", "gate"}) {
			t.Errorf("project %d: activity of created flags %v", p, created)
		}
	}
	var holder int64
	if err := fx.db.Pool.QueryRow(fx.ctx, `SELECT person_id FROM person_distinct_ids WHERE project_id = $1 AND distinct_id = 'u1'`, prod).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if holder != known {
		t.Errorf("u1 in prod is person %d, want the person who had u1-device (%d)", holder, known)
	}

	// Copied again, the flag is updated and the cohorts, matched by name, are not duplicated.
	off := false
	if _, err := fx.s.Flags.UpdateFlag(fx.ctx, fx.source, gate.ID, controlplane.FlagUpdate{Active: &off}); err != nil {
		t.Fatal(err)
	}
	again := fx.copy(fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "gate", TargetProjectIDs: []int64{staging}})
	if len(again.Success) != 1 || again.Success[0].Flag.ID != out.Success[0].Flag.ID || again.Success[0].Flag.Active {
		t.Errorf("second copy: %+v, want flag %d updated, inactive", again, out.Success[0].Flag.ID)
	}
	fx.cohortByName(staging, "beta or paying")
}

func snapshotVersionOf(t *testing.T, db *postgres.DB, project int64) int64 {
	t.Helper()
	var v int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT snapshot_version FROM projects WHERE id = $1`, project).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCopyFlagDependenciesWithoutCopyingThem remaps a flag condition to the target's active
// flag of the same key, and drops it with PostHog's warnings (the copy then inactive) when the
// target's is disabled or missing.
func TestCopyFlagDependenciesWithoutCopyingThem(t *testing.T) {
	t.Parallel()
	fx := newCopyFixture(t)
	base := fx.flag(fx.ctx, fx.source, "base", "", true)
	fx.flag(fx.ctx, fx.source, "gate", fmt.Sprintf(`{"groups": [{"properties": [%s], "rollout_percentage": 100}]}`, flagDep(base.ID)), true)
	active, disabled, missing := fx.project("active"), fx.project("disabled"), fx.project("missing")
	targetBase := fx.flag(fx.ctx, active, "base", "", true)
	fx.flag(fx.ctx, disabled, "base", "", false)

	out := fx.copy(fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "gate", TargetProjectIDs: []int64{active, disabled, missing}})
	if len(out.Success) != 3 {
		t.Fatalf("copy: %+v", out)
	}
	if c := out.Success[0]; !c.Flag.Active || len(c.FlagDependencyWarnings) != 0 ||
		!strings.Contains(string(c.Flag.Filters), fmt.Sprintf(`"key": "%d"`, targetBase.ID)) {
		t.Errorf("active target: %+v %s", c, c.Flag.Filters)
	}
	ungated := "A condition group now has no remaining constraints and will match all users at its rollout percentage — review and re-gate it before re-enabling this flag."
	for i, want := range []string{"Removed dependency on flag 'base' because that flag is disabled in the target project.",
		"Removed dependency on flag 'base' because no flag with that key exists in the target project."} {
		c := out.Success[i+1]
		if c.Flag.Active || !slices.Equal(c.FlagDependencyWarnings, []string{want, ungated}) || strings.Contains(string(c.Flag.Filters), `"flag"`) {
			t.Errorf("target %d: active %v, warnings %q, filters %s", i+1, c.Flag.Active, c.FlagDependencyWarnings, c.Flag.Filters)
		}
	}
}

// TestCopyFlagRefusals: a key the source lacks, a source flag the user may not change, a
// dependency cycle with copy_dependencies, and a target whose flag of the key the user may not
// change (which fails alone, leaving nothing of the copy there: no cohort either).
func TestCopyFlagRefusals(t *testing.T) {
	t.Parallel()
	fx := newCopyFixture(t)
	member, err := postgres.CreateUser(fx.ctx, fx.db, "admin@example.com", "member@example.com", "", false)
	if err != nil {
		t.Fatal(err)
	}
	asMember := controlplane.NewContextWithUser(context.Background(), member)
	target := fx.project("target")
	restrict := func(project, flagID int64) {
		name := fmt.Sprintf("editors-%d", flagID)
		role, err := fx.s.Roles.CreateRole(fx.ctx, controlplane.RoleUpdate{Name: &name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fx.s.Roles.CreateRoleAccess(fx.ctx, project, flagID, role.ID); err != nil {
			t.Fatal(err)
		}
	}
	static := fx.cohort(fx.source, "static", "", true)
	fx.flag(asMember, fx.source, "shared", fmt.Sprintf(`{"groups": [{"properties": [%s]}]}`, cohortProp(static)), true)
	locked := fx.flag(fx.ctx, fx.source, "locked", "", true)
	restrict(fx.source, locked.ID)
	restrict(target, fx.flag(fx.ctx, target, "shared", "", true).ID)

	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  controlplane.FlagCopyRequest
		want *controlplane.Error
	}{
		{"missing key", fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "nope", TargetProjectIDs: []int64{target}}, controlplane.ErrCopySourceMissing},
		{"source of another organisation's", fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "shared", SourceProjectID: 999999, TargetProjectIDs: []int64{target}}, controlplane.ErrCopySourceMissing},
		{"restricted source", asMember, controlplane.FlagCopyRequest{FeatureFlagKey: "locked", TargetProjectIDs: []int64{target}}, controlplane.ErrCopyForbidden},
		{"no targets", fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "shared"}, nil},
		{"51 targets", fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "shared", TargetProjectIDs: make([]int64, 51)}, nil},
	} {
		if tc.req.SourceProjectID == 0 {
			tc.req.SourceProjectID = fx.source
		}
		_, err := fx.s.FlagCopies.CreateFlagCopies(tc.ctx, fx.org, tc.req)
		if tc.want == nil {
			if controlplane.ErrorKind(err) != controlplane.Invalid {
				t.Errorf("%s: %v, want a validation error", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want.Detail) || controlplane.ErrorKind(err) != tc.want.Kind {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := fx.s.FlagCopies.CreateFlagCopies(fx.ctx, fx.org+1, controlplane.FlagCopyRequest{FeatureFlagKey: "shared",
		SourceProjectID: fx.source, TargetProjectIDs: []int64{target}}); controlplane.ErrorKind(err) != controlplane.Forbidden {
		t.Errorf("another organisation: %v, want forbidden", err)
	}

	out := fx.copy(asMember, controlplane.FlagCopyRequest{FeatureFlagKey: "shared", TargetProjectIDs: []int64{target}})
	if len(out.Success) != 0 || len(out.Failed) != 1 || out.Failed[0].ErrorMessage != "You do not have permission to copy flags to this project." {
		t.Errorf("restricted target: %+v", out)
	}
	if list, _, _ := fx.s.Cohorts.FindCohorts(fx.ctx, target, 10, 0); len(list) != 0 {
		t.Errorf("the refused target kept cohorts of the copy: %+v", list[0])
	}

	// A cycle: a → b → a.
	a := fx.flag(fx.ctx, fx.source, "a", "", true)
	b := fx.flag(fx.ctx, fx.source, "b", fmt.Sprintf(`{"groups": [{"properties": [%s]}]}`, flagDep(a.ID)), true)
	if _, err := fx.db.Pool.Exec(fx.ctx, `UPDATE feature_flags SET filters = $2 WHERE id = $1`, a.ID,
		fmt.Sprintf(`{"groups": [{"properties": [%s]}]}`, flagDep(b.ID))); err != nil {
		t.Fatal(err)
	}
	req := controlplane.FlagCopyRequest{FeatureFlagKey: "a", SourceProjectID: fx.source, TargetProjectIDs: []int64{target}, CopyDependencies: true}
	if _, err := fx.s.FlagCopies.CreateFlagCopies(fx.ctx, fx.org, req); err == nil || !strings.Contains(err.Error(), controlplane.ErrCopyDependencyCycle.Detail) {
		t.Errorf("cycle: %v", err)
	}
	preview, err := fx.s.FlagCopies.FindCopyRequirements(fx.ctx, fx.org, req)
	if err != nil || preview.CanCopyDependencies || preview.Reason != controlplane.ErrCopyDependencyCycle.Detail {
		t.Errorf("preview of a cycle: %+v %v", preview, err)
	}
}

// TestCopyRequirementsPreview previews which dependencies would be copied and which reused,
// over targets that have them active, have none, or are out of reach.
func TestCopyRequirementsPreview(t *testing.T) {
	t.Parallel()
	fx := newCopyFixture(t)
	root := fx.flag(fx.ctx, fx.source, "root", "", true)
	mid := fx.flag(fx.ctx, fx.source, "mid", fmt.Sprintf(`{"groups": [{"properties": [%s]}]}`, flagDep(root.ID)), true)
	fx.flag(fx.ctx, fx.source, "top", fmt.Sprintf(`{"groups": [{"properties": [%s]}]}`, flagDep(mid.ID)), true)
	has, lacks := fx.project("has"), fx.project("lacks")
	fx.flag(fx.ctx, has, "root", "", true)

	req := controlplane.FlagCopyRequest{FeatureFlagKey: "top", SourceProjectID: fx.source, TargetProjectIDs: []int64{has, lacks}}
	before := snapshotVersionOf(t, fx.db, lacks)
	got, err := fx.s.FlagCopies.FindCopyRequirements(fx.ctx, fx.org, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &controlplane.CopyRequirements{CanCopyDependencies: true, DependencyCount: 2, CopiedDependencyKeys: []string{"root", "mid"},
		ReusedDependencyKeys: []string{}, Warnings: []string{}, Reason: "2 dependency flags can be copied."}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("preview:\n got %+v\nwant %+v", got, want)
	}
	if snapshotVersionOf(t, fx.db, lacks) != before || fx.flagByKey(lacks, "root") != nil {
		t.Error("the preview wrote")
	}
	req.TargetProjectIDs = []int64{has}
	if got, err := fx.s.FlagCopies.FindCopyRequirements(fx.ctx, fx.org, req); err != nil || !slices.Equal(got.CopiedDependencyKeys, []string{"mid"}) ||
		!slices.Equal(got.ReusedDependencyKeys, []string{"root"}) {
		t.Errorf("preview for a target with root: %+v %v", got, err)
	}
	req.TargetProjectIDs = []int64{has, 999999}
	if got, err := fx.s.FlagCopies.FindCopyRequirements(fx.ctx, fx.org, req); err != nil || got.CanCopyDependencies || got.Reason != "Project not found." {
		t.Errorf("preview with an unknown target: %+v %v", got, err)
	}

	// And the copy does what the preview said: in "has", mid is copied and root reused.
	req.TargetProjectIDs, req.CopyDependencies = []int64{has}, true
	out := fx.copy(fx.ctx, req)
	if len(out.Success) != 1 || !slices.Equal(out.Success[0].CopiedDependencyKeys, []string{"mid"}) || !out.Success[0].Flag.Active {
		t.Errorf("copy: %+v", out)
	}
}

// TestCopyFlagSchedules copies the flag's pending scheduled changes, a release condition's
// cohort remapped, and warns of those a target's flag already has.
func TestCopyFlagSchedules(t *testing.T) {
	t.Parallel()
	fx := newCopyFixture(t)
	vip := fx.cohort(fx.source, "vip", `{"properties": {"type": "AND", "values": [{"key": "vip", "type": "person", "operator": "exact", "value": "yes"}]}}`, false)
	f := fx.flag(fx.ctx, fx.source, "scheduled", "", true)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, payload := range []string{`{"operation": "update_status", "value": false}`,
		fmt.Sprintf(`{"operation": "add_release_condition", "value": {"groups": [{"properties": [%s], "rollout_percentage": 100}]}}`, cohortProp(vip))} {
		if _, err := fx.s.Schedules.CreateScheduledChange(fx.ctx, fx.source, controlplane.NewScheduledChange{RecordID: strconv.FormatInt(f.ID, 10),
			ModelName: controlplane.ModelFeatureFlag, Payload: json.RawMessage(payload), ScheduledAt: &at}); err != nil {
			t.Fatal(err)
		}
	}
	target := fx.project("target")
	out := fx.copy(fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "scheduled", TargetProjectIDs: []int64{target}, CopySchedule: true})
	if len(out.Success) != 1 || out.Success[0].ScheduleCopyWarning != "" {
		t.Fatalf("copy: %+v", out)
	}
	copied := out.Success[0].Flag
	list, _, err := fx.s.Schedules.FindScheduledChanges(fx.ctx, controlplane.ScheduledChangeFilter{ProjectID: target, Limit: 10})
	if err != nil || len(list) != 2 {
		t.Fatalf("target schedules: %v %v", list, err)
	}
	tVip := fx.cohortByName(target, "vip")
	for _, c := range list {
		if c.FlagID() != copied.ID || !c.ScheduledAt.Equal(at) || c.CreatedBy == nil || c.CreatedBy.ID != fx.admin.ID {
			t.Errorf("schedule %+v", c)
		}
		if strings.Contains(string(c.Payload), "add_release_condition") && !slices.Equal(controlplane.CohortReferences(c.Payload), []int64{tVip.ID}) {
			t.Errorf("schedule payload %s, want cohort %d", c.Payload, tVip.ID)
		}
	}
	again := fx.copy(fx.ctx, controlplane.FlagCopyRequest{FeatureFlagKey: "scheduled", TargetProjectIDs: []int64{target}})
	if w := again.Success[0].ScheduleCopyWarning; w != "Flag copied but scheduled changes had dependency warnings: "+controlplane.CopyExistingScheduleWarning {
		t.Errorf("second copy's schedule warning %q", w)
	}
}
