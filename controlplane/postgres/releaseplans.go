package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// ReleasePlanStore stores release plans (controlplane.ReleasePlanService), counts for them as
// events are stored (countForPlans, called by EventStore), and evaluates the running ones
// for the plan evaluator (controlplane.ReleasePlanRunner).
type ReleasePlanStore struct {
	db *DB
}

var (
	_ controlplane.ReleasePlanService = (*ReleasePlanStore)(nil)
	_ controlplane.ReleasePlanRunner  = (*ReleasePlanStore)(nil)
)

// NewReleasePlanStore returns a ReleasePlanStore on db.
func NewReleasePlanStore(db *DB) *ReleasePlanStore { return &ReleasePlanStore{db: db} }

// releasePlanSelect reads plans with their creator, who counts only while a member.
var releasePlanSelect = `SELECT r.id, r.project_id, r.flag_id, r.flag_key, r.steps, r.guardrails, r.alpha, r.on_regression,
	r.min_exposures_per_arm, r.state, r.step, r.step_started_at, r.before_rollouts, r.ended_snapshot_version,
	r.created_at, r.updated_at, ` + userSummaryJSON("cu") + `,
	COALESCE(r.approved_change_request_id::text, ''), COALESCE(r.waiting_change_request_id::text, '')
	FROM release_plans r LEFT JOIN users cu ON cu.id = r.created_by AND cu.removed_at IS NULL`

func scanReleasePlan(row pgx.Row) (*controlplane.ReleasePlan, error) {
	var p controlplane.ReleasePlan
	var steps, guardrails, before []byte
	var createdBy *userRow
	if err := row.Scan(&p.ID, &p.ProjectID, &p.FlagID, &p.FlagKey, &steps, &guardrails, &p.Alpha, &p.OnRegression,
		&p.MinExposuresPerArm, &p.State, &p.Step, &p.StepStartedAt, &before, &p.EndedSnapshotVersion,
		&p.CreatedAt, &p.UpdatedAt, &createdBy, &p.ApprovedChangeRequest, &p.WaitingChangeRequest); err != nil {
		return nil, err
	}
	p.CreatedBy = createdBy.user()
	for _, f := range []struct {
		raw []byte
		dst any
	}{{steps, &p.Steps}, {guardrails, &p.Guardrails}, {before, &p.Before}} {
		if err := json.Unmarshal(f.raw, f.dst); err != nil {
			return nil, fmt.Errorf("release plan %d: %w", p.ID, err)
		}
	}
	return &p, nil
}

// CreateReleasePlan starts a plan on a flag the user may change: the flag is locked and
// checked (CanEditFlag) first, then the plan, then the first step's rollout is written to
// the flag through the flag write path (saveFlagChange: activity log, webhooks), as the
// user, marked as the plan's. When an approval policy gates that write for the user, nothing
// starts: a change request for the plan is filed instead (gatePlanStart), and the plan
// starts when it is approved.
func (s *ReleasePlanStore) CreateReleasePlan(ctx context.Context, projectID, flagID int64, n controlplane.NewReleasePlan) (*controlplane.ReleasePlan, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		flag, err := lockFlagForChange(ctx, tx, u, projectID, flagID)
		if err != nil {
			return err
		}
		if err := n.Validate(); err != nil {
			return err
		}
		if flag.Deleted {
			return controlplane.ErrNotFound
		}
		if err := controlplane.CheckPlanFlag(flag.Filters); err != nil {
			return err
		}
		r := n.Steps[0].RolloutPercentage
		filters, err := controlplane.WithRollouts(flag.Filters, []*float64{&r})
		if err != nil {
			return err
		}
		if err := gatePlanStart(ctx, tx, u, flag, filters, n); err != nil {
			return err
		}
		_, err = startPlan(ctx, tx, s.db.Now(), u, flag, n, "")
		return err
	})
	if err != nil {
		return nil, opError("create release plan", err)
	}
	return s.FindReleasePlan(ctx, projectID, flagID)
}

// FindReleasePlan returns the flag's latest plan, with its tally and decisions, to members of
// the project's organisation.
func (s *ReleasePlanStore) FindReleasePlan(ctx context.Context, projectID, flagID int64) (*controlplane.ReleasePlan, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	q := s.db.conn(ctx)
	p, err := scanReleasePlan(q.QueryRow(ctx, releasePlanSelect+` JOIN projects p ON p.id = r.project_id
		WHERE r.project_id = $1 AND r.flag_id = $2 AND p.organization_id = $3 ORDER BY r.id DESC LIMIT 1`,
		projectID, flagID, u.OrganizationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, missingInProject(ctx, q, u, projectID)
	}
	if err == nil {
		err = loadPlanState(ctx, q, p)
	}
	if err != nil {
		return nil, opError("find release plan", err)
	}
	return p, nil
}

// SetReleasePlanState pauses, resumes or cancels the flag's active plan, for a user who may
// change the flag. The plan's row is locked before the flag's, in the evaluator's order.
func (s *ReleasePlanStore) SetReleasePlanState(ctx context.Context, projectID, flagID int64, state string) (*controlplane.ReleasePlan, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		var id int64
		var current string
		var step int
		err := tx.QueryRow(ctx, `SELECT r.id, r.state, r.step FROM release_plans r JOIN projects p ON p.id = r.project_id
			WHERE r.project_id = $1 AND r.flag_id = $2 AND p.organization_id = $3 AND r.state IN ('running', 'paused')
			FOR UPDATE OF r`, projectID, flagID, u.OrganizationID).Scan(&id, &current, &step)
		if errors.Is(err, pgx.ErrNoRows) {
			return missingInProject(ctx, tx, u, projectID)
		}
		if err != nil {
			return err
		}
		if err := lockEditableFlag(ctx, tx, u, projectID, flagID); err != nil {
			return err
		}
		kind := map[string]string{controlplane.PlanPaused: controlplane.DecisionPaused,
			controlplane.PlanRunning: controlplane.DecisionResumed, controlplane.PlanCancelled: controlplane.DecisionCancelled}[state]
		switch {
		case kind == "":
			return controlplane.FieldError("state", "invalid_choice", fmt.Sprintf("%q is not a state a person may set.", state))
		case state == current:
			return controlplane.FieldError("state", "invalid_input", "The plan is "+current+" already.")
		}
		now := s.db.Now()
		if _, err := tx.Exec(ctx, `UPDATE release_plans SET state = $2, updated_at = $3 WHERE id = $1`, id, state, now); err != nil {
			return err
		}
		return recordDecision(ctx, tx, id, controlplane.ReleaseDecision{At: now, Kind: kind, Step: step,
			Reason: fmt.Sprintf("%s by %s.", map[string]string{controlplane.DecisionPaused: "Paused",
				controlplane.DecisionResumed: "Resumed", controlplane.DecisionCancelled: "Cancelled"}[kind], u.Name())})
	})
	if err != nil {
		return nil, opError("set release plan state", err)
	}
	return s.FindReleasePlan(ctx, projectID, flagID)
}

func recordDecision(ctx context.Context, tx pgx.Tx, planID int64, d controlplane.ReleaseDecision) error {
	_, err := tx.Exec(ctx, `INSERT INTO release_plan_decisions (plan_id, at, kind, step, reason) VALUES ($1, $2, $3, $4, $5)`,
		planID, d.At, d.Kind, d.Step, d.Reason)
	return err
}

// loadPlanState reads what ingestion counted for the plan and its decisions: queries over
// the plan's own rows, at most controlplane.MaxPlanUnits users, never over events.
func loadPlanState(ctx context.Context, q dbConn, p *controlplane.ReleasePlan) error {
	p.Tally = controlplane.PlanTally{Exposed: make([]controlplane.ArmCounts, len(p.Steps)),
		Metrics: make([]controlplane.ArmPair, len(p.Guardrails))}
	rows, err := q.Query(ctx, `SELECT step, count(*) FILTER (WHERE NOT treatment), count(*) FILTER (WHERE treatment)
		FROM release_plan_units WHERE plan_id = $1 GROUP BY step`, p.ID)
	if err != nil {
		return err
	}
	var control, treatment int64
	for rows.Next() {
		var step int
		var c controlplane.ArmCounts
		if err := rows.Scan(&step, &c.Control, &c.Treatment); err != nil {
			rows.Close()
			return err
		}
		if step >= 0 && step < len(p.Tally.Exposed) {
			p.Tally.Exposed[step] = c
		}
		control += c.Control
		treatment += c.Treatment
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, g := range p.Guardrails {
		if g.Stat == controlplane.StatCount { // every exposed user is an observation, 0 without the event
			p.Tally.Metrics[i].Control.N, p.Tally.Metrics[i].Treatment.N = control, treatment
		}
	}
	rows, err = q.Query(ctx, `SELECT v.guardrail, u.treatment, count(*), sum(v.events)::float8, sum(v.events * v.events)::float8,
		sum(v.total / v.events), sum((v.total / v.events) ^ 2)
		FROM release_plan_values v JOIN release_plan_units u ON u.plan_id = v.plan_id AND u.distinct_id = v.distinct_id
		WHERE v.plan_id = $1 AND v.events > 0 GROUP BY 1, 2`, p.ID)
	if err != nil {
		return err
	}
	for rows.Next() {
		var g int
		var treated bool
		var users int64
		var events, eventsSq, means, meansSq float64
		if err := rows.Scan(&g, &treated, &users, &events, &eventsSq, &means, &meansSq); err != nil {
			rows.Close()
			return err
		}
		if g < 0 || g >= len(p.Guardrails) {
			continue
		}
		arm := &p.Tally.Metrics[g].Control
		if treated {
			arm = &p.Tally.Metrics[g].Treatment
		}
		if p.Guardrails[g].Stat == controlplane.StatCount {
			arm.Sum, arm.SumSquares = events, eventsSq
		} else {
			arm.N, arm.Sum, arm.SumSquares = users, means, meansSq
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := q.QueryRow(ctx, `SELECT undecided FROM release_plan_tallies WHERE plan_id = $1`, p.ID).Scan(&p.Tally.Undecided); err != nil {
		return err
	}
	rows, err = q.Query(ctx, `SELECT at, kind, step, reason FROM release_plan_decisions WHERE plan_id = $1 ORDER BY id`, p.ID)
	if err != nil {
		return err
	}
	p.Decisions, err = pgx.CollectRows(rows, pgx.RowToStructByPos[controlplane.ReleaseDecision])
	return err
}

// EvaluatePlans evaluates every running plan once: each is claimed in a transaction of its
// own (FOR UPDATE SKIP LOCKED: a plan another replica is evaluating is skipped, never acted
// on twice), decided on its tally (controlplane.ReleasePlan.Next), and what it decides is
// carried out in that transaction: the flag write as the plan's creator, marked as the
// plan's (saveFlagChange, in a savepoint: a refused write pauses the plan with the refusal as
// its reason instead), the plan's new state and the decision.
//
// A plan whose evaluation fails (the database) does not hold up the others: the first such
// error is returned once every plan has had its turn.
func (s *ReleasePlanStore) EvaluatePlans(ctx context.Context) ([]controlplane.ReleaseDecision, error) {
	var out []controlplane.ReleaseDecision
	var after int64
	var failed error
	for ctx.Err() == nil {
		var d *controlplane.ReleaseDecision
		var id int64
		err := s.db.inTx(ctx, func(tx pgx.Tx) error {
			p, err := scanReleasePlan(tx.QueryRow(ctx, releasePlanSelect+` WHERE r.id = (SELECT id FROM release_plans
				WHERE state = 'running' AND id > $1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)`, after))
			if err != nil {
				return err
			}
			id = p.ID
			if err := loadPlanState(ctx, tx, p); err != nil {
				return err
			}
			now := s.db.Now()
			if err := recordPlanPoints(ctx, tx, p, now); err != nil {
				return err
			}
			if d = p.Next(now); d == nil {
				return nil
			}
			return s.carryOut(ctx, tx, p, d)
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return out, failed
		}
		if err != nil && id == 0 { // not even a plan claimed: the database is not answering
			return out, opError("evaluate release plans", err)
		}
		if err != nil && failed == nil {
			failed = opError("evaluate release plan "+strconv.FormatInt(id, 10), err)
		}
		after = id
		if d != nil && err == nil {
			out = append(out, *d)
		}
	}
	return out, ctx.Err()
}

// carryOut makes decision d of the claimed plan p: the flag write it needs, as the plan's
// creator, then the plan's row and the decision. A refused write (the creator left or lost
// access, the flag was deleted or changed shape) pauses the plan, saying why.
func (s *ReleasePlanStore) carryOut(ctx context.Context, tx pgx.Tx, p *controlplane.ReleasePlan, d *controlplane.ReleaseDecision) error {
	state, step, startedAt := p.State, p.Step, p.StepStartedAt
	var rollouts []*float64
	switch d.Kind {
	case controlplane.DecisionAdvanced:
		r := p.Steps[d.Step].RolloutPercentage
		rollouts, step, startedAt = []*float64{&r}, d.Step, d.At
	case controlplane.DecisionRolledBack:
		rollouts, state = p.Before, controlplane.PlanRolledBack
	case controlplane.DecisionCompleted:
		state = controlplane.PlanCompleted
	case controlplane.DecisionPaused:
		state = controlplane.PlanPaused
	}
	var ended int64
	if rollouts != nil {
		version, err := s.writeRollouts(ctx, tx, p, d, rollouts)
		var gated *controlplane.ApprovalRequiredError
		switch {
		case errors.As(err, &gated):
			return awaitApproval(ctx, tx, p, d, gated)
		case controlplane.ErrorKind(err) != controlplane.Internal:
			d.Reason = fmt.Sprintf("%s The plan could not change the flag and is paused: %s", d.Reason, err.Error())
			d.Kind, state, step, startedAt = controlplane.DecisionFailed, controlplane.PlanPaused, p.Step, p.StepStartedAt
		case err != nil:
			return err
		case d.Kind == controlplane.DecisionRolledBack:
			ended = version
		}
	}
	// A rollback ends the wait for an advance's change request: it is stale now (the flag
	// changed under it), and the plan is done with it.
	if _, err := tx.Exec(ctx, `UPDATE release_plans SET state = $2, step = $3, step_started_at = $4, updated_at = $5,
		ended_snapshot_version = GREATEST(ended_snapshot_version, $6),
		waiting_change_request_id = CASE WHEN $2 = 'running' THEN waiting_change_request_id END WHERE id = $1`,
		p.ID, state, step, startedAt, d.At, ended); err != nil {
		return err
	}
	return recordDecision(ctx, tx, p.ID, *d)
}

// writeRollouts sets the flag's condition groups to rollouts through the flag write path, as
// the plan's creator (CanEditFlag decides on the locked flag, as for any write of theirs),
// in a savepoint; it returns the snapshot version that holds the write. The write is marked
// as the plan's for the approvals gate (gateFlagWrite): a rollback passes it, an advance of an
// approved plan passes a policy that allows approved plans; an advance the gate stops keeps
// the change request it filed (the savepoint is committed) and returns its
// ApprovalRequiredError.
func (s *ReleasePlanStore) writeRollouts(ctx context.Context, tx pgx.Tx, p *controlplane.ReleasePlan, d *controlplane.ReleaseDecision,
	rollouts []*float64) (int64, error) {
	if p.CreatedBy == nil {
		return 0, controlplane.Errorf(controlplane.Forbidden, "permission_denied", "The user who started the plan is no longer a member of the organisation.")
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer sp.Rollback(ctx) //nolint:errcheck // a no-op after commit
	trigger := p.Trigger()
	trigger.Payload = map[string]any{"release_plan_id": p.ID, "step": d.Step, "decision": d.Kind}
	actx := controlplane.NewContextWithTrigger(controlplane.NewContextWithUser(ctx, p.CreatedBy), trigger)
	actx = withPlanWrite(actx, planWrite{rollback: d.Kind == controlplane.DecisionRolledBack, approved: p.ApprovedChangeRequest != ""})
	flag, err := lockFlagForChange(actx, sp, p.CreatedBy, p.ProjectID, p.FlagID)
	if err != nil {
		return 0, err
	}
	if flag.Deleted {
		return 0, controlplane.Errorf(controlplane.NotFound, "not_found", "The feature flag %q was deleted.", flag.Key)
	}
	if err := controlplane.CheckPlanFlag(flag.Filters); err != nil {
		return 0, err
	}
	filters, err := controlplane.WithRollouts(flag.Filters, rollouts)
	if err != nil {
		return 0, err
	}
	updated, err := saveFlagChange(actx, sp, d.At, p.CreatedBy, flag, controlplane.FlagUpdate{Filters: filters})
	var gated *controlplane.ApprovalRequiredError
	if errors.As(err, &gated) && gated.Code == "approval_required" {
		if cerr := sp.Commit(ctx); cerr != nil {
			return 0, cerr
		}
	}
	if err != nil {
		return 0, err
	}
	return updated.SnapshotVersion, sp.Commit(ctx)
}
