package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/controlplane/scheduler/schedulertest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }

// env is a database with a project, its admin and a member, and the guarded services.
type env struct {
	db             *postgres.DB
	url            string
	svc            controlplane.Services // guarded
	store          *postgres.ScheduleStore
	projectID      int64
	admin, member  *controlplane.User
	adminCtx, mCtx context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	db, res, url := postgrestest.Open(t)
	key, err := postgres.NewAuthService(db).AuthenticatePersonalKey(ctx, res.PersonalAPIKey)
	if err != nil {
		t.Fatal(err)
	}
	member, err := postgres.CreateUser(ctx, db, "admin@example.com", "member@example.com", "Mia", false)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, url: url, svc: postgres.NewServices(db, bcrypt.MinCost), store: postgres.NewScheduleStore(db),
		projectID: res.ProjectID, admin: &key.User, member: member}
	e.adminCtx = controlplane.NewContextWithUser(ctx, e.admin)
	e.mCtx = controlplane.NewContextWithUser(ctx, e.member)
	return e
}

func (e *env) flag(t *testing.T, key string, active bool) *controlplane.Flag {
	t.Helper()
	f, err := e.svc.Flags.CreateFlag(e.adminCtx, e.projectID, controlplane.FlagUpdate{Key: &key, Active: &active})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (e *env) schedule(t *testing.T, ctx context.Context, flagID int64, payload string, at time.Time) *controlplane.ScheduledChange {
	t.Helper()
	c, err := e.svc.Schedules.CreateScheduledChange(ctx, e.projectID, controlplane.NewScheduledChange{
		RecordID: strconv.FormatInt(flagID, 10), ModelName: "FeatureFlag", Payload: json.RawMessage(payload), ScheduledAt: &at})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitDone waits until the change is no longer pending and returns it.
func (e *env) waitDone(t *testing.T, id int64, within time.Duration) *controlplane.ScheduledChange {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := e.svc.Schedules.FindScheduledChangeByID(e.adminCtx, e.projectID, id)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Pending() {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("change %d still pending after %s: %+v", id, within, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) activity(t *testing.T, flagID int64) []*controlplane.Activity {
	t.Helper()
	list, _, err := e.svc.Activity.FindActivity(e.adminCtx, controlplane.ActivityFilter{ProjectID: e.projectID,
		Scope: "FeatureFlag", ItemID: strconv.FormatInt(flagID, 10), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestTwoSchedulersRunEachChangeOnce runs two replicas' schedulers on one database: every
// change is applied once, on time, as its creator, marked in the activity log.
func TestTwoSchedulersRunEachChangeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := schedulertest.Start(t, e.db), schedulertest.Start(t, e.db)
	const n = 8
	due := time.Now().Add(time.Second)
	var changes []*controlplane.ScheduledChange
	var flags []*controlplane.Flag
	for i := range n {
		f := e.flag(t, "f"+strconv.Itoa(i), false)
		flags = append(flags, f)
		changes = append(changes, e.schedule(t, e.mCtx, f.ID, `{"operation":"update_status","value":true}`, due))
	}
	// A change can be late only from when it exists: on a slow machine the last ones may be
	// written after their time.
	created := time.Now()
	a.Wake()
	b.Wake()
	for i, c := range changes {
		done := e.waitDone(t, c.ID, 5*time.Second)
		if done.Failed() {
			t.Fatalf("change %d failed: %s", c.ID, done.FailureReason)
		}
		if done.ExecutedAt.Before(c.ScheduledAt) {
			t.Errorf("change %d ran %s before its time", c.ID, c.ScheduledAt.Sub(*done.ExecutedAt))
		}
		from := c.ScheduledAt
		if created.After(from) {
			from = created
		}
		if late := done.ExecutedAt.Sub(from); late > time.Second {
			t.Errorf("change %d ran %s after its time", c.ID, late)
		}
		f, err := e.svc.Flags.FindFlagByID(e.adminCtx, e.projectID, flags[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if !f.Active || f.Version != flags[i].Version+1 || f.LastModifiedBy == nil || f.LastModifiedBy.ID != e.member.ID {
			t.Errorf("flag %s after its change: active %v version %d modified by %+v", f.Key, f.Active, f.Version, f.LastModifiedBy)
		}
		var updates []*controlplane.Activity
		for _, a := range e.activity(t, f.ID) {
			if a.Activity == controlplane.ActivityUpdated {
				updates = append(updates, a)
			}
		}
		if len(updates) != 1 {
			t.Fatalf("flag %s has %d update entries, want 1", f.Key, len(updates))
		}
		trig, _ := json.Marshal(updates[0].Detail.Trigger)
		want := `{"job_type":"scheduled_change","job_id":"` + strconv.FormatInt(c.ID, 10) + `","payload":{"scheduled_change_id":` + strconv.FormatInt(c.ID, 10) + `}}`
		if !jsonEqual(trig, json.RawMessage(want)) || updates[0].User == nil || updates[0].User.ID != e.member.ID {
			t.Errorf("activity of flag %s: user %+v trigger %s, want the member and %s", f.Key, updates[0].User, trig, want)
		}
	}
}

// TestOperations applies each operation PostHog has to a flag and checks the result.
func TestOperations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.flag(t, "ops", true)
	s := schedulertest.Start(t, e.db)
	now := time.Now()
	cond := e.schedule(t, e.adminCtx, f.ID,
		`{"operation":"add_release_condition","value":{"groups":[{"properties":[{"key":"email","value":"@x.com","operator":"icontains","type":"person"}],"rollout_percentage":30}]}}`, now)
	s.Wake() // as the NOTIFY of a creation does
	if c := e.waitDone(t, cond.ID, 5*time.Second); c.Failed() {
		t.Fatal(c.FailureReason)
	}
	variants := e.schedule(t, e.adminCtx, f.ID,
		`{"operation":"update_variants","value":{"variants":[{"key":"a","rollout_percentage":60},{"key":"b","rollout_percentage":40}],"payloads":{"a":"{\"x\":1}"}}}`, now)
	s.Wake()
	if c := e.waitDone(t, variants.ID, 5*time.Second); c.Failed() {
		t.Fatal(c.FailureReason)
	}
	off := e.schedule(t, e.adminCtx, f.ID, `{"operation":"update_status","value":false}`, now)
	s.Wake()
	e.waitDone(t, off.ID, 5*time.Second)
	got, err := e.svc.Flags.FindFlagByID(e.adminCtx, e.projectID, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	var filters struct {
		Groups []struct {
			RolloutPercentage *float64 `json:"rollout_percentage"`
		} `json:"groups"`
		Multivariate struct {
			Variants []struct{ Key string } `json:"variants"`
		} `json:"multivariate"`
		Payloads map[string]string `json:"payloads"`
	}
	if err := json.Unmarshal(got.Filters, &filters); err != nil {
		t.Fatal(err)
	}
	if got.Active || len(filters.Groups) != 2 || filters.Groups[1].RolloutPercentage == nil || *filters.Groups[1].RolloutPercentage != 30 ||
		len(filters.Multivariate.Variants) != 2 || filters.Payloads["a"] != `{"x":1}` {
		t.Errorf("flag after the changes: active %v filters %s", got.Active, got.Filters)
	}
}

// TestPermanentFailures: a deleted flag, a payload that no longer fits the flag, a creator
// who lost edit access and one who left the organisation fail for good, with a reason, and
// leave the flag as it was.
func TestPermanentFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now().Add(time.Hour) // due only when the scheduler starts
	gone := e.flag(t, "gone", false)
	goneChange := e.schedule(t, e.adminCtx, gone.ID, `{"operation":"update_status","value":true}`, now)
	deleted := true
	if _, err := e.svc.Flags.UpdateFlag(e.adminCtx, e.projectID, gone.ID, controlplane.FlagUpdate{Deleted: &deleted}); err != nil {
		t.Fatal(err)
	}

	misfit := e.flag(t, "misfit", true)
	misfitChange := e.schedule(t, e.adminCtx, misfit.ID,
		`{"operation":"add_release_condition","value":{"groups":[{"properties":[],"rollout_percentage":30,"variant":"nope"}]}}`, now)

	locked := e.flag(t, "locked", false)
	lockedChange := e.schedule(t, e.mCtx, locked.ID, `{"operation":"update_status","value":true}`, now)
	name := "editors"
	role, err := e.svc.Roles.CreateRole(e.adminCtx, controlplane.RoleUpdate{Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Roles.CreateRoleAccess(e.adminCtx, e.projectID, locked.ID, role.ID); err != nil {
		t.Fatal(err)
	}

	leaver, err := postgres.CreateUser(context.Background(), e.db, "admin@example.com", "leaver@example.com", "Leo", false)
	if err != nil {
		t.Fatal(err)
	}
	left := e.flag(t, "left", false)
	leftChange := e.schedule(t, controlplane.NewContextWithUser(context.Background(), leaver), left.ID,
		`{"operation":"update_status","value":true}`, now)
	if err := e.svc.Users.RemoveOrganizationMember(e.adminCtx, leaver.UUID); err != nil {
		t.Fatal(err)
	}

	if _, err := e.db.Pool.Exec(context.Background(), `UPDATE scheduled_changes SET scheduled_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	schedulertest.Start(t, e.db)
	for _, tc := range []struct {
		change *controlplane.ScheduledChange
		flag   *controlplane.Flag
		reason string
	}{
		{goneChange, gone, `The feature flag "gone" was deleted.`},
		{misfitChange, misfit, "filters: "},
		{lockedChange, locked, "You do not have permission to perform this action."},
		{leftChange, left, "no longer a member"},
	} {
		c := e.waitDone(t, tc.change.ID, 5*time.Second)
		if !c.Failed() || !strings.Contains(c.FailureReason, tc.reason) {
			t.Errorf("change of %s: executed %v reason %q, want failed with %q", tc.flag.Key, c.ExecutedAt, c.FailureReason, tc.reason)
		}
		f, err := e.svc.Flags.FindFlagByID(e.adminCtx, e.projectID, tc.flag.ID)
		if err != nil {
			t.Fatal(err)
		}
		if f.Active != tc.flag.Active || !jsonEqual(f.Filters, tc.flag.Filters) {
			t.Errorf("flag %s changed by a failed change: active %v filters %s", f.Key, f.Active, f.Filters)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var va, vb any
	_ = json.Unmarshal(a, &va)
	_ = json.Unmarshal(b, &vb)
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return string(ca) == string(cb)
}

// TestTransientFailureIsRetried: an Internal error rolls the attempt back, counts it and puts
// the change off; the last allowed one marks it failed for good.
func TestTransientFailureIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.flag(t, "flaky", false)
	c := e.schedule(t, e.adminCtx, f.ID, `{"operation":"update_status","value":true}`, time.Now().Add(-time.Second))
	boom := errors.New("connection reset")
	for attempt := 1; attempt <= controlplane.MaxScheduledFailures; attempt++ {
		got, err := e.store.RunDue(context.Background(), func(ctx context.Context, _ *controlplane.ScheduledChange) error {
			active := true
			if _, err := e.svc.Flags.UpdateFlag(controlplane.NewContextWithUser(ctx, e.admin), e.projectID, f.ID,
				controlplane.FlagUpdate{Active: &active}); err != nil {
				t.Fatal(err)
			}
			return boom // after a write: the write must not stay
		})
		if !errors.Is(err, boom) || got == nil || got.ID != c.ID || got.FailureCount != attempt {
			t.Fatalf("attempt %d: %+v, %v", attempt, got, err)
		}
		if last := attempt == controlplane.MaxScheduledFailures; got.Pending() == last || !strings.Contains(got.FailureReason, "Internal error") {
			t.Fatalf("attempt %d: pending %v reason %q", attempt, got.Pending(), got.FailureReason)
		}
		if wait, ok, err := e.store.NextDue(context.Background()); err != nil || (ok && wait <= 0) {
			t.Fatalf("attempt %d: next due in %v (%v, %v), want later", attempt, wait, ok, err)
		}
		if _, err := e.db.Pool.Exec(context.Background(), `UPDATE scheduled_changes SET next_attempt_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.svc.Flags.FindFlagByID(e.adminCtx, e.projectID, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Active || got.Version != f.Version {
		t.Errorf("a rolled-back attempt changed the flag: %+v", got)
	}
}

// TestCancelledChangeNeverRuns: a deleted pending change is not applied.
func TestCancelledChangeNeverRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.flag(t, "cancel", false)
	s := schedulertest.Start(t, e.db)
	// Due far enough ahead that it is still pending when deleted, however slow the machine.
	due := time.Now().Add(2 * time.Second)
	c := e.schedule(t, e.adminCtx, f.ID, `{"operation":"update_status","value":true}`, due)
	s.Wake()
	if err := e.svc.Schedules.DeleteScheduledChange(e.mCtx, e.projectID, c.ID); err != nil {
		t.Fatal(err)
	}
	s.Wake()
	time.Sleep(time.Until(due.Add(300 * time.Millisecond)))
	got, err := e.svc.Flags.FindFlagByID(e.adminCtx, e.projectID, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Active {
		t.Error("a cancelled change ran")
	}
	if _, err := e.svc.Schedules.FindScheduledChangeByID(e.adminCtx, e.projectID, c.ID); controlplane.ErrorKind(err) != controlplane.NotFound {
		t.Errorf("the cancelled change is still found: %v", err)
	}
}

// TestSchedulerNeedsOneConnection: a change is applied on the connection that holds its
// claim (the permission checks read through it too), so a scheduler whose pool has a single
// connection still runs changes; were a second connection needed, requests waiting on the
// flag's row lock could take every other one and nothing would move.
func TestSchedulerNeedsOneConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u, err := neturl.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	one, err := postgres.Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	f := e.flag(t, "single", false)
	c := e.schedule(t, e.mCtx, f.ID, `{"operation":"update_status","value":true}`, time.Now())
	schedulertest.Start(t, one)
	if got := e.waitDone(t, c.ID, 5*time.Second); got.Failed() {
		t.Fatal(got.FailureReason)
	}
}
