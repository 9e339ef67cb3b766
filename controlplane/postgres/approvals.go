package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// ApprovalStore stores a project's approval policies and change requests, and applies a
// change request in the transaction of the vote that reaches its quorum.
type ApprovalStore struct {
	db *DB
}

var _ controlplane.ApprovalService = (*ApprovalStore)(nil)

// NewApprovalStore returns an ApprovalStore on db.
func NewApprovalStore(db *DB) *ApprovalStore { return &ApprovalStore{db: db} }

var policySelect = `SELECT a.id::text, a.project_id, a.action_key, a.conditions, a.approver_config, a.allow_self_approve,
	a.bypass_org_membership_levels, a.bypass_roles::text[], ` + durationMicros("a.expires_after") + `, a.enabled,
	a.allow_approved_release_plans, ` + userSummaryJSON("cu") + `, a.created_at, a.updated_at
	FROM approval_policies a LEFT JOIN users cu ON cu.id = a.created_by`

func scanPolicy(row pgx.Row) (*controlplane.ApprovalPolicy, error) {
	var p controlplane.ApprovalPolicy
	var createdBy *userRow
	var expires int64
	if err := row.Scan(&p.ID, &p.ProjectID, &p.ActionKey, &p.Conditions, &p.ApproverConfig, &p.AllowSelfApprove,
		&p.BypassOrgMembershipLevels, &p.BypassRoles, &expires, &p.Enabled, &p.AllowApprovedReleasePlans, &createdBy, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return nil, err
	}
	p.ExpiresAfter, p.CreatedBy = micros(expires), createdBy.user()
	return &p, nil
}

func findPolicies(ctx context.Context, q dbConn, sql string, args ...any) ([]*controlplane.ApprovalPolicy, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.ApprovalPolicy, error) { return scanPolicy(r) })
}

// FindApprovalPolicies returns a page of the project's policies, newest first, to members of
// its organisation.
func (s *ApprovalStore) FindApprovalPolicies(ctx context.Context, f controlplane.ApprovalPolicyFilter) ([]*controlplane.ApprovalPolicy, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add("a.project_id = ?", f.ProjectID)
	if f.ActionKey != "" {
		c.add("a.action_key = ?", f.ActionKey)
	}
	if f.Enabled != nil {
		c.add("a.enabled = ?", *f.Enabled)
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM approval_policies a`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count approval policies", err)
	}
	page, args := c.page(f.Limit, f.Offset)
	list, err := findPolicies(ctx, s.db.Pool, policySelect+c.where()+` ORDER BY a.created_at DESC, a.id`+page, args...)
	if err != nil {
		return nil, 0, opError("find approval policies", err)
	}
	return list, total, nil
}

// FindApprovalPolicyByID returns one policy of the project, to members of its organisation.
func (s *ApprovalStore) FindApprovalPolicyByID(ctx context.Context, projectID int64, id string) (*controlplane.ApprovalPolicy, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	p, err := findPolicy(ctx, s.db.Pool, u, projectID, id, false)
	if err != nil {
		return nil, opError("find approval policy", err)
	}
	return p, nil
}

// findPolicy reads a policy of the project scoped by u's organisation: ErrPermissionDenied
// for a project out of reach, ErrNotFound for no such policy (an id that is no UUID too).
func findPolicy(ctx context.Context, q dbConn, u *controlplane.User, projectID int64, id string, forUpdate bool) (*controlplane.ApprovalPolicy, error) {
	if !controlplane.ValidUUID(id) {
		return nil, missingInProject(ctx, q, u, projectID)
	}
	sql := policySelect + ` JOIN projects p ON p.id = a.project_id WHERE a.project_id = $1 AND a.id = $2::uuid AND p.organization_id = $3`
	if forUpdate {
		sql += ` FOR UPDATE OF a`
	}
	p, err := scanPolicy(q.QueryRow(ctx, sql, projectID, id, u.OrganizationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, missingInProject(ctx, q, u, projectID)
	}
	return p, err
}

// adminProject checks that u administers the organisation of the project (CanAdminOrg):
// ErrPermissionDenied otherwise, whether the project exists or not.
func adminProject(ctx context.Context, q dbConn, u *controlplane.User, projectID int64) error {
	var orgID int64
	err := q.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, projectID).Scan(&orgID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !controlplane.CanAdminOrg(u, orgID)) {
		return controlplane.ErrPermissionDenied
	}
	return err
}

// checkPolicyReferences refuses approvers and bypass roles that are not of the organisation.
func checkPolicyReferences(ctx context.Context, tx pgx.Tx, orgID int64, p *controlplane.ApprovalPolicy) error {
	roles := slices.Concat(p.ApproverConfig.Roles, p.BypassRoles)
	if len(roles) > 0 {
		rows, err := tx.Query(ctx, `SELECT id::text FROM roles WHERE organization_id = $1 AND id = ANY($2::uuid[])`, orgID, roles)
		if err != nil {
			return err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		var missing []string
		for _, r := range roles {
			if !slices.Contains(found, strings.ToLower(r)) && !slices.Contains(missing, r) {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			return controlplane.FieldError("bypass_roles", "invalid_input", "Roles do not exist: "+strings.Join(missing, ", "))
		}
	}
	if users := p.ApproverConfig.Users; len(users) > 0 {
		rows, err := tx.Query(ctx, `SELECT id FROM users WHERE organization_id = $1 AND removed_at IS NULL AND id = ANY($2)`, orgID, users)
		if err != nil {
			return err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if !containsAll(found, users) {
			return controlplane.FieldError("approver_config", "invalid_input", "Approvers must be members of the organisation.")
		}
	}
	return nil
}

// CreateApprovalPolicy validates and stores a policy, when the user administers the
// project's organisation; one policy per action and project.
func (s *ApprovalStore) CreateApprovalPolicy(ctx context.Context, projectID int64, upd controlplane.ApprovalPolicyUpdate) (*controlplane.ApprovalPolicy, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var created *controlplane.ApprovalPolicy
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if err := adminProject(ctx, tx, u, projectID); err != nil {
			return err
		}
		p := controlplane.ApprovalPolicy{ProjectID: projectID, ExpiresAfter: controlplane.DefaultPolicyExpiry, Enabled: true,
			BypassOrgMembershipLevels: []int{}, BypassRoles: []string{}}
		if err := upd.Validate(true, &p); err != nil {
			return err
		}
		upd.Apply(&p)
		if err := checkPolicyReferences(ctx, tx, u.OrganizationID, &p); err != nil {
			return err
		}
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO approval_policies (project_id, action_key, conditions, approver_config, allow_self_approve,
				bypass_org_membership_levels, bypass_roles, expires_after, enabled, created_by, allow_approved_release_plans)
			VALUES ($1, $2, $3, $4, $5, $6, $7::uuid[], $8 * interval '1 microsecond', $9, $10, $11) RETURNING id::text`,
			projectID, p.ActionKey, p.Conditions, p.ApproverConfig, p.AllowSelfApprove, p.BypassOrgMembershipLevels, p.BypassRoles,
			p.ExpiresAfter.Microseconds(), p.Enabled, u.ID, p.AllowApprovedReleasePlans).Scan(&id)
		if isUniqueViolation(err, "approval_policies_project_action") {
			return controlplane.ErrPolicyExists
		}
		if err != nil {
			return err
		}
		created, err = findPolicy(ctx, tx, u, projectID, id, false)
		return err
	})
	if err != nil {
		return nil, opError("create approval policy", err)
	}
	return created, nil
}

// UpdateApprovalPolicy changes a policy, when the user administers the project's
// organisation. Requests already filed keep the policy they were filed under.
func (s *ApprovalStore) UpdateApprovalPolicy(ctx context.Context, projectID int64, id string, upd controlplane.ApprovalPolicyUpdate) (*controlplane.ApprovalPolicy, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var updated *controlplane.ApprovalPolicy
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if err := adminProject(ctx, tx, u, projectID); err != nil {
			return err
		}
		p, err := findPolicy(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		if err := upd.Validate(false, p); err != nil {
			return err
		}
		upd.Apply(p)
		if err := checkPolicyReferences(ctx, tx, u.OrganizationID, p); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE approval_policies SET action_key = $3, conditions = $4, approver_config = $5,
				allow_self_approve = $6, bypass_org_membership_levels = $7, bypass_roles = $8::uuid[],
				expires_after = $9 * interval '1 microsecond', enabled = $10, allow_approved_release_plans = $11,
				updated_at = clock_timestamp()
			WHERE project_id = $1 AND id = $2::uuid`, projectID, id, p.ActionKey, p.Conditions, p.ApproverConfig, p.AllowSelfApprove,
			p.BypassOrgMembershipLevels, p.BypassRoles, p.ExpiresAfter.Microseconds(), p.Enabled, p.AllowApprovedReleasePlans)
		if isUniqueViolation(err, "approval_policies_project_action") {
			return controlplane.ErrPolicyExists
		}
		if err != nil {
			return err
		}
		updated, err = findPolicy(ctx, tx, u, projectID, id, false)
		return err
	})
	if err != nil {
		return nil, opError("update approval policy", err)
	}
	return updated, nil
}

// DeleteApprovalPolicy deletes a policy, when the user administers the project's
// organisation. Requests already filed under it stay, with their snapshot of it.
func (s *ApprovalStore) DeleteApprovalPolicy(ctx context.Context, projectID int64, id string) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		if err := adminProject(ctx, tx, u, projectID); err != nil {
			return err
		}
		if _, err := findPolicy(ctx, tx, u, projectID, id, true); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM approval_policies WHERE project_id = $1 AND id = $2::uuid`, projectID, id)
		return err
	})
	if err != nil {
		return opError("delete approval policy", err)
	}
	return nil
}

// changeRequestSelect reads change requests, aliased c, with their users and votes.
var changeRequestSelect = `SELECT c.id::text, c.project_id, c.action_key, c.action_version, c.resource_type, c.resource_id,
	c.intent, c.intent_display, c.policy_snapshot, c.validation_status, COALESCE(c.validation_errors, 'null'::jsonb), c.validated_at,
	c.state, ` + userSummaryJSON("cu") + `, ` + userSummaryJSON("au") + `, c.created_at, c.updated_at, c.expires_at, c.applied_at,
	COALESCE(c.apply_error, ''), COALESCE(c.result_data, 'null'::jsonb), COALESCE(c.snapshot_version, 0), c.live_at,
	COALESCE((SELECT json_agg(json_build_object('id', v.id, 'decision', v.decision, 'reason', v.reason, 'created_at', v.created_at,
		'created_by', ` + userSummaryJSON("vu") + `) ORDER BY v.created_at, v.id)
		FROM approvals v LEFT JOIN users vu ON vu.id = v.created_by WHERE v.change_request_id = c.id), '[]')
	FROM change_requests c LEFT JOIN users cu ON cu.id = c.created_by LEFT JOIN users au ON au.id = c.applied_by`

// voteRow is a vote as changeRequestSelect aggregates it.
type voteRow struct {
	ID        string    `json:"id"`
	Decision  string    `json:"decision"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy *userRow  `json:"created_by"`
}

func scanChangeRequest(row pgx.Row) (*controlplane.ChangeRequest, error) {
	var c controlplane.ChangeRequest
	var createdBy, appliedBy *userRow
	var votes []voteRow
	var validationErrors, result []byte
	if err := row.Scan(&c.ID, &c.ProjectID, &c.ActionKey, &c.ActionVersion, &c.ResourceType, &c.ResourceID, &c.Intent,
		&c.IntentDisplay, &c.PolicySnapshot, &c.ValidationStatus, &validationErrors, &c.ValidatedAt, &c.State, &createdBy, &appliedBy,
		&c.CreatedAt, &c.UpdatedAt, &c.ExpiresAt, &c.AppliedAt, &c.ApplyError, &result, &c.SnapshotVersion, &c.LiveAt,
		&votes); err != nil {
		return nil, err
	}
	c.ValidationErrors, c.ResultData = validationErrors, result
	c.CreatedBy, c.AppliedBy = createdBy.user(), appliedBy.user()
	c.Approvals = make([]controlplane.Approval, len(votes))
	for i, v := range votes {
		c.Approvals[i] = controlplane.Approval{ID: v.ID, CreatedBy: v.CreatedBy.user(), Decision: v.Decision, Reason: v.Reason,
			CreatedAt: v.CreatedAt}
	}
	return &c, nil
}

// findChangeRequest reads a request of the project whoever asks: the callers have checked
// the project.
func findChangeRequest(ctx context.Context, q dbConn, projectID int64, id string, forUpdate bool) (*controlplane.ChangeRequest, error) {
	sql := changeRequestSelect + ` WHERE c.project_id = $1 AND c.id = $2::uuid`
	if forUpdate {
		sql += ` FOR UPDATE OF c`
	}
	c, err := scanChangeRequest(q.QueryRow(ctx, sql, projectID, id))
	return c, notFoundIfNoRows(err)
}

// findChangeRequestFor reads a request of the project scoped by u's organisation, as u sees
// it: ErrPermissionDenied for a project out of reach, ErrNotFound for no such request.
func findChangeRequestFor(ctx context.Context, q dbConn, u *controlplane.User, projectID int64, id string, forUpdate bool) (*controlplane.ChangeRequest, error) {
	if err := reachProject(ctx, q, u, projectID); err != nil {
		return nil, err
	}
	if !controlplane.ValidUUID(id) {
		return nil, controlplane.ErrNotFound
	}
	c, err := findChangeRequest(ctx, q, projectID, id, forUpdate)
	if err != nil {
		return nil, err
	}
	return c, viewAs(ctx, q, u, c)
}

// viewAs fills what u may do with the requests.
func viewAs(ctx context.Context, q dbConn, u *controlplane.User, list ...*controlplane.ChangeRequest) error {
	roles, err := userRoles(ctx, q, u.ID)
	if err != nil {
		return err
	}
	for _, c := range list {
		c.Viewer = controlplane.ChangeRequestViewer{CanApprove: c.ApproveRefusal(u, roles) == nil, CanCancel: c.CanBeCanceledBy(u),
			IsRequester: c.IsRequester(u)}
		for _, a := range c.Approvals {
			if a.CreatedBy != nil && a.CreatedBy.ID == u.ID {
				c.Viewer.Decision = a.Decision
			}
		}
	}
	return nil
}

// FindChangeRequests returns a page of the project's requests, newest first, to members of
// its organisation, after expiring its overdue ones.
func (s *ApprovalStore) FindChangeRequests(ctx context.Context, f controlplane.ChangeRequestFilter) ([]*controlplane.ChangeRequest, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := reachProject(ctx, s.db.conn(ctx), u, f.ProjectID); err != nil {
		return nil, 0, err
	}
	if _, err := s.expire(ctx, &f.ProjectID); err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add("c.project_id = ?", f.ProjectID)
	if len(f.States) > 0 {
		c.add("c.state = ANY(?)", f.States)
	}
	if f.ActionKey != "" {
		c.add("c.action_key = ?", f.ActionKey)
	}
	if f.Requester != nil {
		c.add("c.created_by = ?", *f.Requester)
	}
	if f.ResourceType != "" {
		c.add("c.resource_type = ?", f.ResourceType)
	}
	if f.ResourceID != "" {
		c.add("c.resource_id = ?", f.ResourceID)
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM change_requests c`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count change requests", err)
	}
	page, args := c.page(f.Limit, f.Offset)
	rows, err := s.db.Pool.Query(ctx, changeRequestSelect+c.where()+` ORDER BY c.created_at DESC, c.id`+page, args...)
	if err != nil {
		return nil, 0, opError("find change requests", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.ChangeRequest, error) { return scanChangeRequest(r) })
	if err != nil {
		return nil, 0, opError("find change requests", err)
	}
	if err := viewAs(ctx, s.db.Pool, u, list...); err != nil {
		return nil, 0, opError("find change requests", err)
	}
	return list, total, nil
}

// FindChangeRequestByID returns one request of the project, to members of its organisation,
// after expiring the project's overdue ones.
func (s *ApprovalStore) FindChangeRequestByID(ctx context.Context, projectID int64, id string) (*controlplane.ChangeRequest, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := reachProject(ctx, s.db.conn(ctx), u, projectID); err != nil {
		return nil, err
	}
	if _, err := s.expire(ctx, &projectID); err != nil {
		return nil, err
	}
	c, err := findChangeRequestFor(ctx, s.db.Pool, u, projectID, id, false)
	if err != nil {
		return nil, opError("find change request", err)
	}
	return c, nil
}

// vote runs decide on the request locked in a transaction, as u, after expiring the
// project's overdue requests; u must reach the project.
func (s *ApprovalStore) vote(ctx context.Context, op string, projectID int64, id string,
	decide func(tx pgx.Tx, u *controlplane.User, roles []string, c *controlplane.ChangeRequest) (*controlplane.Decision, error)) (*controlplane.Decision, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := reachProject(ctx, s.db.conn(ctx), u, projectID); err != nil {
		return nil, err
	}
	if _, err := s.expire(ctx, &projectID); err != nil {
		return nil, err
	}
	var d *controlplane.Decision
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		c, err := findChangeRequestFor(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		roles, err := userRoles(ctx, tx, u.ID)
		if err != nil {
			return err
		}
		if d, err = decide(tx, u, roles, c); err != nil {
			return err
		}
		if d.ChangeRequest, err = findChangeRequest(ctx, tx, projectID, id, false); err != nil {
			return err
		}
		return viewAs(ctx, tx, u, d.ChangeRequest)
	})
	if err != nil {
		return nil, opError(op, err)
	}
	return d, nil
}

// castVote records u's vote; a second vote of one user is ErrAlreadyVoted.
func castVote(ctx context.Context, tx pgx.Tx, u *controlplane.User, id, decision, reason string) error {
	_, err := tx.Exec(ctx, `INSERT INTO approvals (change_request_id, created_by, decision, reason) VALUES ($1::uuid, $2, $3, $4)`,
		id, u.ID, decision, reason)
	if isUniqueViolation(err, "approvals_one_vote") {
		return controlplane.ErrAlreadyVoted
	}
	return err
}

// ApproveChangeRequest records the user's approval; at quorum the request is approved and
// applied at once, in this transaction (applyChangeRequest).
func (s *ApprovalStore) ApproveChangeRequest(ctx context.Context, projectID int64, id, reason string) (*controlplane.Decision, error) {
	return s.vote(ctx, "approve change request", projectID, id, func(tx pgx.Tx, u *controlplane.User, roles []string, c *controlplane.ChangeRequest) (*controlplane.Decision, error) {
		if err := c.ApproveRefusal(u, roles); err != nil {
			return nil, err
		}
		if err := castVote(ctx, tx, u, c.ID, controlplane.DecisionApproved, reason); err != nil {
			return nil, err
		}
		count, quorum := c.ApprovedCount()+1, c.PolicySnapshot.Quorum
		if count < quorum {
			return &controlplane.Decision{Status: controlplane.StateApproved,
				Message: fmt.Sprintf("Approval recorded. %d/%d approvals received.", count, quorum)}, nil
		}
		if err := setState(ctx, tx, c, controlplane.StateApproved, ""); err != nil {
			return nil, err
		}
		if err := enqueueChangeRequestEvent(ctx, tx, u, controlplane.EventChangeRequestApproved, c); err != nil {
			return nil, err
		}
		result, err := s.applyChangeRequest(ctx, tx, c)
		if err != nil {
			return nil, err
		}
		if c.State == controlplane.StateFailed {
			return &controlplane.Decision{Status: controlplane.StateFailed,
				Message: "Quorum reached but application failed: " + c.ApplyError}, nil
		}
		return &controlplane.Decision{Status: controlplane.StateApplied, Message: "Quorum reached. Change applied successfully.",
			Result: result}, nil
	})
}

// RejectChangeRequest records the user's rejection, with its required reason: one rejection
// rejects the request.
func (s *ApprovalStore) RejectChangeRequest(ctx context.Context, projectID int64, id, reason string) (*controlplane.Decision, error) {
	return s.vote(ctx, "reject change request", projectID, id, func(tx pgx.Tx, u *controlplane.User, roles []string, c *controlplane.ChangeRequest) (*controlplane.Decision, error) {
		if err := c.ApproveRefusal(u, roles); err != nil {
			return nil, err
		}
		if strings.TrimSpace(reason) == "" {
			return nil, controlplane.ErrReasonRequired
		}
		if err := castVote(ctx, tx, u, c.ID, controlplane.DecisionRejected, reason); err != nil {
			return nil, err
		}
		if err := setState(ctx, tx, c, controlplane.StateRejected, ""); err != nil {
			return nil, err
		}
		if err := enqueueChangeRequestEvent(ctx, tx, u, controlplane.EventChangeRequestRejected, c); err != nil {
			return nil, err
		}
		return &controlplane.Decision{Status: controlplane.StateRejected, Message: "Change request rejected."}, nil
	})
}

// CancelChangeRequest withdraws the user's own pending request (CanBeCanceledBy), recorded as
// the requester's rejection.
func (s *ApprovalStore) CancelChangeRequest(ctx context.Context, projectID int64, id, reason string) (*controlplane.Decision, error) {
	return s.vote(ctx, "cancel change request", projectID, id, func(tx pgx.Tx, u *controlplane.User, _ []string, c *controlplane.ChangeRequest) (*controlplane.Decision, error) {
		if !c.CanBeCanceledBy(u) {
			return nil, controlplane.ErrCannotCancel
		}
		if strings.TrimSpace(reason) == "" {
			reason = "Canceled by requester"
		}
		if _, err := tx.Exec(ctx, `INSERT INTO approvals (change_request_id, created_by, decision, reason) VALUES ($1::uuid, $2, 'rejected', $3)
			ON CONFLICT ON CONSTRAINT approvals_one_vote DO UPDATE SET decision = 'rejected', reason = EXCLUDED.reason`, c.ID, u.ID, reason); err != nil {
			return nil, err
		}
		if err := setState(ctx, tx, c, controlplane.StateRejected, ""); err != nil {
			return nil, err
		}
		if err := enqueueChangeRequestEvent(ctx, tx, u, controlplane.EventChangeRequestRejected, c); err != nil {
			return nil, err
		}
		return &controlplane.Decision{Status: "canceled", Message: "Change request canceled."}, nil
	})
}

// setState moves the request to state (with the error that failed it), and settles the
// scheduled changes that wait for it when the state is final.
func setState(ctx context.Context, tx pgx.Tx, c *controlplane.ChangeRequest, state, applyError string) error {
	validation := ""
	if state == controlplane.StateExpired {
		validation = controlplane.ValidationExpired
	}
	if _, err := tx.Exec(ctx, `UPDATE change_requests SET state = $2, apply_error = NULLIF($3, ''),
			validation_status = COALESCE(NULLIF($4, ''), validation_status), updated_at = clock_timestamp()
		WHERE id = $1::uuid`, c.ID, state, applyError, validation); err != nil {
		return err
	}
	c.State, c.ApplyError = state, applyError
	switch state {
	case controlplane.StateRejected, controlplane.StateExpired, controlplane.StateFailed, controlplane.StateApplied:
		if err := settleWaitingPlan(ctx, tx, c); err != nil {
			return err
		}
	}
	switch state {
	case controlplane.StateRejected, controlplane.StateExpired, controlplane.StateFailed:
		return settleScheduledChanges(ctx, tx, c.ID, "Change request "+c.ID+" was "+state+".")
	case controlplane.StateApplied:
		return settleScheduledChanges(ctx, tx, c.ID, "")
	}
	return nil
}

// settleScheduledChanges finishes the scheduled changes waiting for the request: executed when
// it was applied (reason ""), failed with reason otherwise.
func settleScheduledChanges(ctx context.Context, tx pgx.Tx, requestID, reason string) error {
	rows, err := tx.Query(ctx, scheduledSelect+` WHERE s.change_request_id = $1::uuid AND s.executed_at IS NULL FOR UPDATE OF s`, requestID)
	if err != nil {
		return err
	}
	waiting, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.ScheduledChange, error) { return scanScheduled(r) })
	if err != nil {
		return err
	}
	for _, c := range waiting {
		if err := finishScheduledChange(ctx, tx, c, reason); err != nil {
			return err
		}
	}
	return nil
}

// errPreconditionFailed is how a request whose flag changed since it was filed fails.
type errPreconditionFailed struct{ expected, got int }

func (e *errPreconditionFailed) Error() string {
	return fmt.Sprintf("Precondition failed: Flag version mismatch: expected %d, got %d", e.expected, e.got)
}

// applyChangeRequest makes the approved change in tx, as its requester (who must still be
// a member allowed to change the flag), through the flag writes every writer uses, past the
// gate: re-validated, and refused when the flag's version is no longer the one the request
// was filed against. A refusal fails the request (its state and apply_error say why) and
// writes nothing on the flag; only an internal error is returned.
func (s *ApprovalStore) applyChangeRequest(ctx context.Context, tx pgx.Tx, c *controlplane.ChangeRequest) (*controlplane.ApplyResult, error) {
	if err := lockWaitingPlan(ctx, tx, c.ID); err != nil { // before the flag, in the plan evaluator's order
		return nil, err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer sp.Rollback(ctx) //nolint:errcheck // a no-op after commit
	flag, applyErr := s.applyIntent(ctx, sp, c)
	var pre *errPreconditionFailed
	var domain *controlplane.Error
	switch {
	case applyErr == nil:
		if err := sp.Commit(ctx); err != nil {
			return nil, err
		}
	case errors.As(applyErr, &pre):
		return nil, failRequest(ctx, tx, sp, c, pre.Error())
	case errors.As(applyErr, &domain):
		return nil, failRequest(ctx, tx, sp, c, "Validation failed: "+failureReason(applyErr))
	default:
		return nil, applyErr
	}
	result := &controlplane.ApplyResult{ResourceID: flag.ID, ResourceVersion: flag.Version}
	resultJSON, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `UPDATE change_requests SET applied_at = clock_timestamp(), applied_by = created_by, result_data = $2,
			snapshot_version = $3, resource_id = COALESCE(resource_id, $4) WHERE id = $1::uuid`,
		c.ID, resultJSON, flag.SnapshotVersion, fmt.Sprint(flag.ID)); err != nil {
		return nil, err
	}
	c.SnapshotVersion = flag.SnapshotVersion
	if err := setState(ctx, tx, c, controlplane.StateApplied, ""); err != nil {
		return nil, err
	}
	if err := enqueueChangeRequestEvent(ctx, tx, c.CreatedBy, controlplane.EventChangeRequestApplied, c); err != nil {
		return nil, err
	}
	return result, nil
}

// failRequest rolls back the savepoint of a failed application and fails the request.
func failRequest(ctx context.Context, tx, sp pgx.Tx, c *controlplane.ChangeRequest, reason string) error {
	if err := sp.Rollback(ctx); err != nil {
		return err
	}
	return setState(ctx, tx, c, controlplane.StateFailed, reason)
}

// errRequesterGone fails a request whose requester left the organisation.
var errRequesterGone = &controlplane.Error{Kind: controlplane.Forbidden, Code: "permission_denied",
	Detail: "The user who requested this change is no longer a member of the organisation."}

// applyIntent writes the request's change in tx as its requester, past the gate, and returns
// the flag as it now is, with the snapshot version that holds it.
func (s *ApprovalStore) applyIntent(ctx context.Context, tx pgx.Tx, c *controlplane.ChangeRequest) (*controlplane.Flag, error) {
	if c.CreatedBy == nil {
		return nil, errRequesterGone
	}
	requester, err := findRequester(ctx, tx, c.CreatedBy.ID)
	if err != nil {
		return nil, err
	}
	ctx = withApprovedChange(controlplane.NewContextWithUser(ctx, requester))
	upd := c.Intent.FullRequestData
	if c.Intent.FlagID == nil {
		if err := reachProject(ctx, tx, requester, c.ProjectID); err != nil {
			return nil, err
		}
		f, err := createFlag(ctx, tx, s.db.Now(), requester, c.ProjectID, upd)
		if err != nil {
			return nil, err
		}
		f.SnapshotVersion, err = bumpSnapshotVersion(ctx, tx, c.ProjectID)
		return f, err
	}
	before, err := lockFlagForChange(ctx, tx, requester, c.ProjectID, *c.Intent.FlagID)
	if err != nil {
		return nil, err
	}
	if want := c.Intent.Preconditions.Version; want != nil && *want != before.Version {
		return nil, &errPreconditionFailed{expected: *want, got: before.Version}
	}
	if c.Intent.ReleasePlan != nil {
		return startPlan(ctx, tx, s.db.Now(), requester, before, *c.Intent.ReleasePlan, c.ID)
	}
	return saveFlagChange(ctx, tx, s.db.Now(), requester, before, upd)
}

// findRequester reads a user who is still a member of their organisation, else errRequesterGone.
func findRequester(ctx context.Context, q dbConn, id int64) (*controlplane.User, error) {
	var r *userRow
	err := q.QueryRow(ctx, `SELECT `+userSummaryJSON("u")+` FROM users u WHERE u.id = $1 AND`+activeUser, id).Scan(&r)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errRequesterGone
	}
	if err != nil {
		return nil, err
	}
	return r.user(), nil
}

// expire expires the overdue pending requests, of one project or all, and returns how many.
func (s *ApprovalStore) expire(ctx context.Context, projectID *int64) (int, error) {
	n := 0
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text, project_id FROM change_requests
			WHERE state = 'pending' AND expires_at <= clock_timestamp() AND ($1::bigint IS NULL OR project_id = $1)
			ORDER BY expires_at FOR UPDATE SKIP LOCKED LIMIT 100`, projectID)
		if err != nil {
			return err
		}
		type overdue struct {
			id      string
			project int64
		}
		list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (overdue, error) {
			var o overdue
			return o, r.Scan(&o.id, &o.project)
		})
		if err != nil {
			return err
		}
		for _, o := range list {
			if err := setState(ctx, tx, &controlplane.ChangeRequest{ID: o.id, ProjectID: o.project}, controlplane.StateExpired, ""); err != nil {
				return err
			}
		}
		n = len(list)
		return nil
	})
	if err != nil {
		return 0, opError("expire change requests", err)
	}
	return n, nil
}

// ChangeRequestUpkeep expires overdue change requests and confirms applied ones live, for
// every project: system-level access that only the control plane's approvalwatch holds.
type ChangeRequestUpkeep struct {
	store *ApprovalStore
	edges *EdgeSessionStore
}

var _ controlplane.ChangeRequestUpkeep = (*ChangeRequestUpkeep)(nil)

// NewChangeRequestUpkeep returns the upkeep on db.
func NewChangeRequestUpkeep(db *DB) *ChangeRequestUpkeep {
	return &ChangeRequestUpkeep{store: NewApprovalStore(db), edges: NewEdgeSessionStore(db)}
}

// ExpireChangeRequests expires overdue pending requests of every project, a batch at a time.
func (u *ChangeRequestUpkeep) ExpireChangeRequests(ctx context.Context) (int, error) {
	return u.store.expire(ctx, nil)
}

// ConfirmLiveChangeRequests reads the applied requests not yet live (a batch, oldest first),
// counts the laggards of each one's version, and marks live those without any, in a
// transaction that reports it: the row's live_at, set only while NULL, makes the event fire
// once across replicas.
func (u *ChangeRequestUpkeep) ConfirmLiveChangeRequests(ctx context.Context) (int, error) {
	db := u.store.db
	rows, err := db.Pool.Query(ctx, `SELECT id::text, project_id, snapshot_version FROM change_requests
		WHERE state = 'applied' AND live_at IS NULL ORDER BY applied_at, id LIMIT 100`)
	if err != nil {
		return 0, opError("find unconfirmed change requests", err)
	}
	type applied struct {
		id               string
		project, version int64
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (applied, error) {
		var a applied
		return a, r.Scan(&a.id, &a.project, &a.version)
	})
	if err != nil {
		return 0, opError("find unconfirmed change requests", err)
	}
	n := 0
	for _, a := range list {
		laggards, err := u.edges.CountLaggards(ctx, a.project, a.version)
		if controlplane.ErrorKind(err) == controlplane.NotFound {
			continue // the project is gone
		}
		if err != nil {
			return n, err
		}
		if laggards > 0 {
			continue
		}
		confirmed := false
		err = db.inTx(ctx, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE change_requests SET live_at = clock_timestamp(), updated_at = clock_timestamp()
				WHERE id = $1::uuid AND live_at IS NULL`, a.id)
			if err != nil || tag.RowsAffected() == 0 {
				return err // another replica confirmed it
			}
			c, err := findChangeRequest(ctx, tx, a.project, a.id, false)
			if err != nil {
				return err
			}
			confirmed = true
			return enqueueChangeRequestEvent(ctx, tx, nil, controlplane.EventChangeRequestLive, c)
		})
		if err != nil {
			return n, opError("confirm change request live", err)
		}
		if confirmed {
			n++
		}
	}
	return n, nil
}

// durationMicros is an interval column as microseconds, for a time.Duration.
func durationMicros(col string) string {
	return `(EXTRACT(EPOCH FROM ` + col + `) * 1000000)::bigint`
}

// micros converts what durationMicros read.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// containsAll reports whether every element of want is in have.
func containsAll[T comparable](have, want []T) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
