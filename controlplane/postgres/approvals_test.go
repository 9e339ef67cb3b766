package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// approvalEnv is a project with its admin (who sets policies), a requester and two approvers.
type approvalEnv struct {
	db                                 *postgres.DB
	s                                  controlplane.Services
	project                            int64
	admin, requester, alice, bob       *controlplane.User
	adminCtx, reqCtx, aliceCtx, bobCtx context.Context
	flag                               *controlplane.Flag
}

func newApprovalEnv(t *testing.T) *approvalEnv {
	t.Helper()
	db, res, _ := mustOpen(t)
	ctx := t.Context()
	e := &approvalEnv{db: db, s: postgres.NewServices(db, bcrypt.MinCost), project: res.ProjectID}
	e.admin = &mustKey(t, db, res.PersonalAPIKey).User
	user := func(email string) *controlplane.User {
		u, err := postgres.CreateUser(ctx, db, "admin@example.com", email, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	e.requester, e.alice, e.bob = user("req@example.com"), user("alice@example.com"), user("bob@example.com")
	as := func(u *controlplane.User) context.Context { return controlplane.NewContextWithUser(ctx, u) }
	e.adminCtx, e.reqCtx, e.aliceCtx, e.bobCtx = as(e.admin), as(e.requester), as(e.alice), as(e.bob)
	f, err := e.s.Flags.CreateFlag(e.reqCtx, e.project, controlplane.FlagUpdate{Key: ptr("checkout"), Active: ptr(false),
		Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 10}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.flag = f
	return e
}

func (e *approvalEnv) policy(t *testing.T, action string, quorum int, mod ...func(*controlplane.ApprovalPolicyUpdate)) *controlplane.ApprovalPolicy {
	t.Helper()
	upd := controlplane.ApprovalPolicyUpdate{ActionKey: &action,
		ApproverConfig: &controlplane.ApproverConfig{Users: []int64{e.alice.ID, e.bob.ID}, Quorum: quorum}}
	for _, m := range mod {
		m(&upd)
	}
	p, err := e.s.Approvals.CreateApprovalPolicy(e.adminCtx, e.project, upd)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gated makes the write and expects the gate to stop it, returning the request it filed.
func (e *approvalEnv) gated(t *testing.T, ctx context.Context, upd controlplane.FlagUpdate, code string) *controlplane.ChangeRequest {
	t.Helper()
	_, err := e.s.Flags.UpdateFlag(ctx, e.project, e.flag.ID, upd)
	var gate *controlplane.ApprovalRequiredError
	if !errors.As(err, &gate) || gate.Code != code {
		t.Fatalf("UpdateFlag: got %v, want %s", err, code)
	}
	if controlplane.ErrorKind(err) != controlplane.Conflict {
		t.Errorf("the gate's error is of kind %v, not Conflict", controlplane.ErrorKind(err))
	}
	return gate.ChangeRequest
}

func (e *approvalEnv) stored(t *testing.T) *controlplane.Flag {
	t.Helper()
	f, err := e.s.Flags.FindFlagByID(e.adminCtx, e.project, e.flag.ID)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGatedUpdateIsAppliedAtQuorum(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t)
	e.policy(t, controlplane.ActionFlagEnable, 2)

	cr := e.gated(t, e.reqCtx, controlplane.FlagUpdate{Active: ptr(true)}, "approval_required")
	if f := e.stored(t); f.Active || f.Version != e.flag.Version {
		t.Fatalf("a gated write changed the flag: active %v version %d", f.Active, f.Version)
	}
	if cr.State != controlplane.StatePending || cr.ActionKey != controlplane.ActionFlagEnable || cr.ResourceID == nil ||
		*cr.ResourceID != strconv.FormatInt(e.flag.ID, 10) || cr.PolicySnapshot.Quorum != 2 {
		t.Fatalf("filed %+v", cr)
	}
	// The same change again names the pending request.
	if dup := e.gated(t, e.reqCtx, controlplane.FlagUpdate{Active: ptr(true)}, "change_request_pending"); dup.ID != cr.ID {
		t.Errorf("the duplicate names %s, not %s", dup.ID, cr.ID)
	}

	if _, err := e.s.Approvals.ApproveChangeRequest(e.reqCtx, e.project, cr.ID, ""); !isDetail(err, "You cannot approve your own change request") {
		t.Errorf("self-approval: %v", err)
	}
	if _, err := e.s.Approvals.ApproveChangeRequest(e.adminCtx, e.project, cr.ID, ""); !isDetail(err, "You are not in the approver set for this change request") {
		t.Errorf("a non-approver (even an admin): %v", err)
	}
	d, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, cr.ID, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != controlplane.StateApproved || d.Message != "Approval recorded. 1/2 approvals received." || d.ChangeRequest.State != controlplane.StatePending {
		t.Errorf("first approval: %+v", d)
	}
	if _, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, cr.ID, "again"); !errors.Is(err, controlplane.ErrAlreadyVoted) {
		t.Errorf("second vote: %v", err)
	}
	if e.stored(t).Active {
		t.Fatal("applied before quorum")
	}
	d, err = e.s.Approvals.ApproveChangeRequest(e.bobCtx, e.project, cr.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	f := e.stored(t)
	if d.Status != controlplane.StateApplied || d.ChangeRequest.State != controlplane.StateApplied || !f.Active {
		t.Fatalf("at quorum: %+v, flag active %v", d, f.Active)
	}
	if d.Result == nil || d.Result.ResourceID != f.ID || d.Result.ResourceVersion != f.Version {
		t.Errorf("result %+v, flag version %d", d.Result, f.Version)
	}
	if d.ChangeRequest.SnapshotVersion == 0 || d.ChangeRequest.AppliedBy == nil || d.ChangeRequest.AppliedBy.ID != e.requester.ID {
		t.Errorf("applied request: snapshot %d, applied_by %+v", d.ChangeRequest.SnapshotVersion, d.ChangeRequest.AppliedBy)
	}
	if f.LastModifiedBy == nil || f.LastModifiedBy.ID != e.requester.ID {
		t.Errorf("the change is not the requester's: %+v", f.LastModifiedBy)
	}
	if _, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, cr.ID, ""); !isDetail(err, "Only pending change requests can be approved") {
		t.Errorf("approving an applied request: %v", err)
	}
}

func isDetail(err error, detail string) bool {
	var e *controlplane.Error
	return errors.As(err, &e) && e.Detail == detail
}

func TestRolloutConditionsAndConflicts(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t)
	e.policy(t, controlplane.ActionFlagUpdate, 1, func(u *controlplane.ApprovalPolicyUpdate) {
		u.Conditions = &controlplane.PolicyConditions{Type: controlplane.ConditionChangeAmount, Field: "rollout_percentage",
			Operator: ">", Value: ptr(20.0)}
	})
	small := json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 25}]}`)
	if _, err := e.s.Flags.UpdateFlag(e.reqCtx, e.project, e.flag.ID, controlplane.FlagUpdate{Filters: small}); err != nil {
		t.Fatalf("a change of 15 points is not gated: %v", err)
	}
	big := json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 80}]}`)
	cr := e.gated(t, e.reqCtx, controlplane.FlagUpdate{Filters: big}, "approval_required")
	if cr.ActionKey != controlplane.ActionFlagUpdate || len(cr.Intent.TriggeredPaths) != 1 {
		t.Errorf("filed %+v", cr)
	}
	// Enabling while changing the rollout matches two policies.
	e.policy(t, controlplane.ActionFlagEnable, 1)
	_, err := e.s.Flags.UpdateFlag(e.reqCtx, e.project, e.flag.ID, controlplane.FlagUpdate{Active: ptr(true),
		Filters: json.RawMessage(`{"groups": [{"properties": [], "rollout_percentage": 90}]}`)})
	var conflict *controlplane.PolicyConflictError
	if !errors.As(err, &conflict) || len(conflict.Policies) != 2 || controlplane.ErrorKind(err) != controlplane.Invalid {
		t.Errorf("two policies: %v", err)
	}
	// A second policy for one action is refused.
	_, err = e.s.Approvals.CreateApprovalPolicy(e.adminCtx, e.project, controlplane.ApprovalPolicyUpdate{
		ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: &controlplane.ApproverConfig{Users: []int64{e.alice.ID}, Quorum: 1}})
	if !errors.Is(err, controlplane.ErrPolicyExists) {
		t.Errorf("second policy: %v", err)
	}
}

func TestBypassAndCreation(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t)
	e.policy(t, controlplane.ActionFlagEnable, 1, func(u *controlplane.ApprovalPolicyUpdate) {
		u.BypassOrgMembershipLevels = &[]int{controlplane.MembershipLevelAdmin}
	})
	// An admin bypasses; a member creating an active flag is gated, and nothing is created.
	if _, err := e.s.Flags.UpdateFlag(e.adminCtx, e.project, e.flag.ID, controlplane.FlagUpdate{Active: ptr(true)}); err != nil {
		t.Fatalf("bypass: %v", err)
	}
	_, err := e.s.Flags.CreateFlag(e.reqCtx, e.project, controlplane.FlagUpdate{Key: ptr("born-active")})
	var gate *controlplane.ApprovalRequiredError
	if !errors.As(err, &gate) || gate.ChangeRequest.ResourceID != nil {
		t.Fatalf("creating an active flag: %v", err)
	}
	_, total, err := e.s.Flags.FindFlags(e.adminCtx, controlplane.FlagFilter{ProjectID: e.project, Search: "born-active", Limit: 10})
	if err != nil || total != 0 {
		t.Fatalf("the gated flag was created: %d, %v", total, err)
	}
	if _, err := e.s.Flags.CreateFlag(e.reqCtx, e.project, controlplane.FlagUpdate{Key: ptr("born-inactive"), Active: ptr(false)}); err != nil {
		t.Errorf("an inactive flag is not gated: %v", err)
	}
	d, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, gate.ChangeRequest.ID, "")
	if err != nil || d.Status != controlplane.StateApplied || d.ChangeRequest.ResourceID == nil {
		t.Fatalf("approving the creation: %+v, %v", d, err)
	}
	f, err := e.s.Flags.FindFlagByID(e.adminCtx, e.project, d.Result.ResourceID)
	if err != nil || f.Key != "born-active" || !f.Active || f.CreatedBy.ID != e.requester.ID {
		t.Errorf("created %+v, %v", f, err)
	}
}

func TestStaleExpiredRejectedAndCancelled(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t)
	e.policy(t, controlplane.ActionFlagEnable, 1)
	cr := e.gated(t, e.reqCtx, controlplane.FlagUpdate{Active: ptr(true)}, "approval_required")

	// Someone else changes the flag: the request goes stale, and approving it fails it.
	if _, err := e.s.Flags.UpdateFlag(e.adminCtx, e.project, e.flag.ID, controlplane.FlagUpdate{Name: ptr("renamed")}); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.Approvals.FindChangeRequestByID(e.reqCtx, e.project, cr.ID)
	if err != nil || got.ValidationStatus != controlplane.ValidationStale || !got.Viewer.CanCancel || !got.Viewer.IsRequester {
		t.Fatalf("after the flag changed: %+v, %v", got, err)
	}
	d, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, cr.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	want := "Precondition failed: Flag version mismatch: expected " + strconv.Itoa(e.flag.Version) + ", got " + strconv.Itoa(e.flag.Version+1)
	if d.Status != controlplane.StateFailed || d.ChangeRequest.State != controlplane.StateFailed || d.ChangeRequest.ApplyError != want {
		t.Errorf("approving a stale request: %+v (apply_error %q)", d, d.ChangeRequest.ApplyError)
	}
	if e.stored(t).Active {
		t.Error("a failed request changed the flag")
	}

	// Rejection needs a reason and rejects at once.
	cr = e.gated(t, e.reqCtx, controlplane.FlagUpdate{Active: ptr(true)}, "approval_required")
	if _, err := e.s.Approvals.RejectChangeRequest(e.bobCtx, e.project, cr.ID, " "); !errors.Is(err, controlplane.ErrReasonRequired) {
		t.Errorf("rejection without reason: %v", err)
	}
	if d, err := e.s.Approvals.RejectChangeRequest(e.bobCtx, e.project, cr.ID, "not now"); err != nil || d.ChangeRequest.State != controlplane.StateRejected {
		t.Errorf("rejection: %+v, %v", d, err)
	}

	// Only the requester cancels, before any approval.
	e2 := e.gated(t, e.reqCtx, controlplane.FlagUpdate{Active: ptr(true)}, "approval_required")
	if _, err := e.s.Approvals.CancelChangeRequest(e.aliceCtx, e.project, e2.ID, ""); !errors.Is(err, controlplane.ErrCannotCancel) {
		t.Errorf("cancel by another: %v", err)
	}
	if d, err := e.s.Approvals.CancelChangeRequest(e.reqCtx, e.project, e2.ID, ""); err != nil || d.ChangeRequest.State != controlplane.StateRejected {
		t.Errorf("cancel: %+v, %v", d, err)
	}

	// An overdue request expires on read, and can no longer be approved.
	e3 := e.gated(t, e.reqCtx, controlplane.FlagUpdate{Active: ptr(true)}, "approval_required")
	if _, err := e.db.Pool.Exec(t.Context(), `UPDATE change_requests SET expires_at = now() - interval '1 second' WHERE id = $1`, e3.ID); err != nil {
		t.Fatal(err)
	}
	list, _, err := e.s.Approvals.FindChangeRequests(e.aliceCtx, controlplane.ChangeRequestFilter{ProjectID: e.project,
		States: []string{controlplane.StateExpired}, Limit: 10})
	if err != nil || len(list) != 1 || list[0].ID != e3.ID || list[0].ValidationStatus != controlplane.ValidationExpired {
		t.Fatalf("expired: %+v, %v", list, err)
	}
	if _, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, e3.ID, ""); !isDetail(err, "Only pending change requests can be approved") {
		t.Errorf("approving an expired request: %v", err)
	}
}

func TestPolicyWritesAreAdmins(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t)
	_, err := e.s.Approvals.CreateApprovalPolicy(e.reqCtx, e.project, controlplane.ApprovalPolicyUpdate{
		ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: &controlplane.ApproverConfig{Users: []int64{e.alice.ID}, Quorum: 1}})
	if !errors.Is(err, controlplane.ErrPermissionDenied) {
		t.Errorf("a member creates a policy: %v", err)
	}
	p := e.policy(t, controlplane.ActionFlagDisable, 1)
	if p.ExpiresAfter != controlplane.DefaultPolicyExpiry || !p.Enabled {
		t.Errorf("defaults: %+v", p)
	}
	if _, err := e.s.Approvals.FindApprovalPolicyByID(e.reqCtx, e.project, p.ID); err != nil {
		t.Errorf("a member reads a policy: %v", err)
	}
	off := false
	if p, err = e.s.Approvals.UpdateApprovalPolicy(e.adminCtx, e.project, p.ID, controlplane.ApprovalPolicyUpdate{Enabled: &off}); err != nil || p.Enabled {
		t.Fatalf("disable: %+v, %v", p, err)
	}
	if _, err := e.s.Flags.UpdateFlag(e.reqCtx, e.project, e.flag.ID, controlplane.FlagUpdate{Active: ptr(true)}); err != nil {
		t.Errorf("a disabled policy gates: %v", err)
	}
	_, err = e.s.Approvals.CreateApprovalPolicy(e.adminCtx, e.project, controlplane.ApprovalPolicyUpdate{
		ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: &controlplane.ApproverConfig{Users: []int64{999}, Quorum: 1}})
	if controlplane.ErrorKind(err) != controlplane.Invalid {
		t.Errorf("an approver of no organisation: %v", err)
	}
	if err := e.s.Approvals.DeleteApprovalPolicy(e.adminCtx, e.project, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Approvals.FindApprovalPolicyByID(e.adminCtx, e.project, p.ID); !errors.Is(err, controlplane.ErrNotFound) {
		t.Errorf("deleted policy: %v", err)
	}
}

// TestScheduledChangeWaitsForApproval runs a due scheduled change into the gate: it waits,
// visibly, and approving its request makes it.
func TestScheduledChangeWaitsForApproval(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t)
	e.policy(t, controlplane.ActionFlagEnable, 1)
	at := time.Now().Add(-time.Second)
	sc, err := e.s.Schedules.CreateScheduledChange(e.reqCtx, e.project, controlplane.NewScheduledChange{
		RecordID: strconv.FormatInt(e.flag.ID, 10), ModelName: controlplane.ModelFeatureFlag,
		Payload: json.RawMessage(`{"operation": "update_status", "value": true}`), ScheduledAt: &at})
	if err != nil {
		t.Fatal(err)
	}
	queue := postgres.NewScheduleStore(e.db)
	ran, err := queue.RunDue(t.Context(), func(ctx context.Context, c *controlplane.ScheduledChange) error {
		_, err := e.s.Flags.UpdateFlag(controlplane.NewContextWithUser(ctx, c.CreatedBy), c.ProjectID, c.FlagID(),
			controlplane.FlagUpdate{Active: ptr(true)})
		return err
	})
	if err != nil || ran == nil || !ran.AwaitsApproval() {
		t.Fatalf("RunDue: %+v, %v", ran, err)
	}
	if again, err := queue.RunDue(t.Context(), func(context.Context, *controlplane.ScheduledChange) error {
		t.Error("a change waiting for approval ran again")
		return nil
	}); err != nil || again != nil {
		t.Errorf("second RunDue: %+v, %v", again, err)
	}
	got, err := e.s.Schedules.FindScheduledChangeByID(e.adminCtx, e.project, sc.ID)
	if err != nil || got.FailureReason != "Waiting for approval: change request "+ran.ChangeRequestID || !got.Pending() {
		t.Fatalf("waiting: %+v, %v", got, err)
	}
	if _, err := e.s.Approvals.ApproveChangeRequest(e.aliceCtx, e.project, ran.ChangeRequestID, ""); err != nil {
		t.Fatal(err)
	}
	got, err = e.s.Schedules.FindScheduledChangeByID(e.adminCtx, e.project, sc.ID)
	if err != nil || got.Pending() || got.Failed() || !e.stored(t).Active {
		t.Errorf("after approval: %+v, %v", got, err)
	}
}
