package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// The approval gate. Every write of a flag passes createFlag or changeFlag, and both call
// gateFlagWrite in the write's transaction before they write anything, so every writer — the
// API, the console, the scheduler, early access features, and any writer built on them — is
// gated without code of its own. A gated write writes nothing on the flag: it files a change
// request in the transaction and returns *controlplane.ApprovalRequiredError, on which inTx
// commits (the request, and only what the transaction wrote before the gate) instead of
// rolling back.

type approvedKey struct{}

// withApprovedChange returns ctx whose flag writes pass the gate: the application of a change
// request its approvers approved. Only this package makes one.
func withApprovedChange(ctx context.Context) context.Context {
	return context.WithValue(ctx, approvedKey{}, true)
}

func approvedChange(ctx context.Context) bool {
	v, _ := ctx.Value(approvedKey{}).(bool)
	return v
}

// planWrite marks the flag writes of a release plan (releaseplans.go): rollback writes
// past the gate; approved lets the advances of a plan whose start was approved pass a
// policy that allows approved plans.
type planWrite struct{ rollback, approved bool }

type planWriteKey struct{}

// withPlanWrite returns ctx whose flag writes are a release plan's.
func withPlanWrite(ctx context.Context, w planWrite) context.Context {
	return context.WithValue(ctx, planWriteKey{}, w)
}

func planWriteOf(ctx context.Context) planWrite {
	w, _ := ctx.Value(planWriteKey{}).(planWrite)
	return w
}

// gateFlagWrite decides whether actor may write after (before is the stored flag, nil for a
// creation) without approval: nil when no enabled policy of the project matches the write
// (matchGate) or the actor bypasses the one that does; a PolicyConflictError when more than
// one matches; else an ApprovalRequiredError, naming the pending request for the same change
// when there is one, or the request it files now (fileChangeRequest).
//
// A release plan's rollback always passes: it restores the rollouts the flag had when the
// plan started, a state the project had accepted (and, under a gate, approved with the
// plan), and a regression must not wait for a reviewer. An advance of a plan whose start was
// approved passes a policy with AllowApprovedReleasePlans.
func gateFlagWrite(ctx context.Context, tx pgx.Tx, actor *controlplane.User, before, after *controlplane.Flag,
	upd *controlplane.FlagUpdate) error {
	if approvedChange(ctx) || planWriteOf(ctx).rollback {
		return nil
	}
	m, err := matchGate(ctx, tx, actor, before, after, upd)
	if err != nil || m.policy == nil || m.policy.AllowApprovedReleasePlans && planWriteOf(ctx).approved {
		return err
	}
	return fileChangeRequest(ctx, tx, actor, before, after, m)
}

// gateMatch is the action of a write that a policy gates for its actor, a member of roles.
type gateMatch struct {
	action *controlplane.FlagAction
	policy *controlplane.ApprovalPolicy // nil: nothing gates the write
	roles  []string
}

// matchGate returns the action of the write and the one enabled policy that gates it for
// actor, or a nil policy when none does (no policy matches the write, or actor bypasses the
// one that does); a PolicyConflictError when more than one matches.
func matchGate(ctx context.Context, tx pgx.Tx, actor *controlplane.User, before, after *controlplane.Flag,
	upd *controlplane.FlagUpdate) (gateMatch, error) {
	actions := controlplane.FlagActions(before, after, upd)
	if len(actions) == 0 {
		return gateMatch{}, nil
	}
	keys := make([]string, len(actions))
	for i, a := range actions {
		keys[i] = a.Key
	}
	policies, err := findPolicies(ctx, tx, policySelect+` WHERE a.project_id = $1 AND a.enabled AND a.action_key = ANY($2)
		ORDER BY a.created_at, a.id`, after.ProjectID, keys)
	if err != nil {
		return gateMatch{}, err
	}
	type match struct {
		action *controlplane.FlagAction
		policy *controlplane.ApprovalPolicy
	}
	var matches []match
	for i := range actions {
		for _, p := range policies {
			if p.ActionKey == actions[i].Key && p.Conditions.Match(&actions[i].Intent) {
				matches = append(matches, match{&actions[i], p})
			}
		}
	}
	switch len(matches) {
	case 0:
		return gateMatch{}, nil
	case 1:
	default:
		conflict := &controlplane.PolicyConflictError{}
		for _, m := range matches {
			conflict.Policies = append(conflict.Policies, controlplane.ConflictingPolicy{ID: m.policy.ID, Name: m.policy.ActionKey + " policy"})
		}
		return gateMatch{}, conflict
	}
	roles, err := userRoles(ctx, tx, actor.ID)
	if err != nil {
		return gateMatch{}, err
	}
	m := gateMatch{action: matches[0].action, policy: matches[0].policy, roles: roles}
	if m.policy.Bypasses(actor, roles) {
		m.policy = nil
	}
	return m, nil
}

// fileChangeRequest files the action m's policy gates as a change request of actor and
// returns the ApprovalRequiredError that names it; or, when a request for the same action
// on the flag is already pending, the change_request_pending one naming that request.
func fileChangeRequest(ctx context.Context, tx pgx.Tx, actor *controlplane.User, before, after *controlplane.Flag, m gateMatch) error {
	action, policy, roles := m.action, m.policy, m.roles
	var resourceID *string
	if before != nil {
		id := strconv.FormatInt(before.ID, 10)
		resourceID = &id
	}
	if pending, err := findOpenRequest(ctx, tx, after.ProjectID, action.Key, resourceID, after.Key); err != nil || pending != nil {
		if err != nil {
			return err
		}
		return &controlplane.ApprovalRequiredError{Code: "change_request_pending",
			Message: "A pending approval request already exists for this action", ChangeRequest: pending}
	}
	snapshot := policy.Snapshot()
	message := "A change request has been created and is pending approval."
	if !policy.AllowSelfApprove && snapshot.IsApprover(actor, roles) {
		message = "A change request has been created and is pending approval from others."
	}
	var id string
	err := tx.QueryRow(ctx, `INSERT INTO change_requests (project_id, action_key, resource_type, resource_id, intent, intent_display,
			policy_snapshot, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp() + $9 * interval '1 microsecond') RETURNING id::text`,
		after.ProjectID, action.Key, controlplane.ResourceFlag, resourceID, action.Intent, action.Display(), snapshot, actor.ID,
		policy.ExpiresAfter.Microseconds()).Scan(&id)
	if err != nil {
		return fmt.Errorf("file change request: %w", err)
	}
	cr, err := findChangeRequest(ctx, tx, after.ProjectID, id, false)
	if err != nil {
		return err
	}
	if err := enqueueChangeRequestEvent(ctx, tx, actor, controlplane.EventChangeRequestRequested, cr); err != nil {
		return err
	}
	approvers := policy.ApproverConfig
	approvers.Users, approvers.Roles = snapshot.Users, snapshot.Roles
	return &controlplane.ApprovalRequiredError{Code: "approval_required", Message: message, ChangeRequest: cr,
		RequiredApprovers: &approvers}
}

// findOpenRequest returns the pending or approved request for the action on the flag
// (resourceID), or for a creation the one creating a flag with the key; nil when there is none.
func findOpenRequest(ctx context.Context, tx pgx.Tx, projectID int64, action string, resourceID *string, key string) (*controlplane.ChangeRequest, error) {
	var id string
	err := tx.QueryRow(ctx, `SELECT id::text FROM change_requests WHERE project_id = $1 AND resource_type = $2 AND action_key = $3
		AND state IN ('pending', 'approved')
		AND CASE WHEN $4::text IS NULL THEN resource_id IS NULL AND intent->>'flag_key' = $5 ELSE resource_id = $4 END
		ORDER BY created_at LIMIT 1`, projectID, controlplane.ResourceFlag, action, resourceID, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return findChangeRequest(ctx, tx, projectID, id, false)
}

// userRoles returns the ids of the roles the user is a member of.
func userRoles(ctx context.Context, q dbConn, userID int64) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT role_id::text FROM role_memberships WHERE user_id = $1 ORDER BY 1`, userID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// markRequestsStale is the statement, run with a flag's change (changeFlag's $1 the project,
// $2 the flag), that marks the pending requests about the flag stale: it changed under them,
// so they would fail their precondition if approved.
const markRequestsStale = `UPDATE change_requests SET validation_status = 'stale', validated_at = clock_timestamp(),
	updated_at = clock_timestamp()
	WHERE project_id = $1 AND resource_type = 'feature_flag' AND resource_id = ($2::bigint)::text AND state = 'pending'
	AND validation_status <> 'stale'`

// enqueueChangeRequestEvent reports an event of a change request to the project's webhooks.
func enqueueChangeRequestEvent(ctx context.Context, tx pgx.Tx, actor *controlplane.User, kind string, cr *controlplane.ChangeRequest) error {
	version := cr.SnapshotVersion
	if version == 0 {
		v, err := snapshotVersion(ctx, tx, cr.ProjectID)
		if err != nil {
			return err
		}
		version = v
	}
	return EnqueueWebhookEvent(ctx, tx, controlplane.WebhookEvent{ProjectID: cr.ProjectID, Kind: kind, Actor: actor,
		SnapshotVersion: version, ObjectType: controlplane.ObjectChangeRequest, Object: cr.Event()})
}
