package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// Release plans under the approvals gate. Starting a plan on a flag whose rollout changes a
// policy gates files a change request for the plan itself (gatePlanStart); approving it
// starts the plan in the vote's transaction (applyIntent → startPlan). An advance the gate
// stops leaves its change request filed and the plan waiting for it
// (release_plans.waiting_change_request_id); the request's outcome settles the plan in the
// transaction that decides it (setState → settleWaitingPlan): applied, the plan is at the
// next step; rejected, expired or failed, the plan pauses. Rollbacks pass the gate
// (gateFlagWrite), and a policy with allow_approved_release_plans lets the advances of a
// plan whose start was approved pass it too.

// gatePlanStart reports, for a plan n to start on the locked flag whose first step writes
// filters, the change request that must approve it: nil when no policy gates the write for
// u; else the ApprovalRequiredError of the request it files (or of the pending request that
// already asks to change the flag's rollout).
func gatePlanStart(ctx context.Context, tx pgx.Tx, u *controlplane.User, flag *lockedFlag, filters json.RawMessage,
	n controlplane.NewReleasePlan) error {
	if !flag.gated {
		return nil
	}
	upd := controlplane.FlagUpdate{Filters: filters}
	after := *flag.Flag
	upd.Apply(&after)
	m, err := matchGate(ctx, tx, u, flag.Flag, &after, &upd)
	if err != nil || m.policy == nil {
		return err
	}
	m.action.Intent.ReleasePlan = &n
	return fileChangeRequest(ctx, tx, u, flag.Flag, &after, m)
}

// startPlan stores plan n on the locked flag, as u, and writes its first step's rollout to
// the flag through the flag write path (saveFlagChange: activity log, webhooks, the gate),
// marked as the plan's; approvedBy is the change request whose approval starts it ("" when
// none did). It returns the flag as the first step left it.
func startPlan(ctx context.Context, tx pgx.Tx, now time.Time, u *controlplane.User, flag *lockedFlag,
	n controlplane.NewReleasePlan, approvedBy string) (*controlplane.Flag, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if flag.Deleted {
		return nil, controlplane.ErrNotFound
	}
	if err := controlplane.CheckPlanFlag(flag.Filters); err != nil {
		return nil, err
	}
	before, err := controlplane.GroupRollouts(flag.Filters)
	if err != nil {
		return nil, err
	}
	steps, _ := json.Marshal(n.Steps)
	guardrails, _ := json.Marshal(n.Guardrails)
	beforeJSON, _ := json.Marshal(before)
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO release_plans (project_id, flag_id, flag_key, steps, guardrails, alpha, on_regression,
		min_exposures_per_arm, state, step_started_at, before_rollouts, created_by, created_at, updated_at, approved_change_request_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $10, $11, $9, $9, NULLIF($12, '')::uuid) RETURNING id`,
		flag.ProjectID, flag.ID, flag.Key, steps, guardrails, n.Alpha, n.OnRegression, n.MinExposuresPerArm, now, beforeJSON, u.ID,
		approvedBy).Scan(&id)
	if isUniqueViolation(err, "release_plans_one_active") {
		return nil, controlplane.ErrPlanActive
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO release_plan_tallies (plan_id) VALUES ($1)`, id); err != nil {
		return nil, err
	}
	plan := &controlplane.ReleasePlan{ID: id, ProjectID: flag.ProjectID, FlagID: flag.ID}
	r := n.Steps[0].RolloutPercentage
	filters, err := controlplane.WithRollouts(flag.Filters, []*float64{&r})
	if err != nil {
		return nil, err
	}
	updated, err := saveFlagChange(controlplane.NewContextWithTrigger(ctx, plan.Trigger()), tx, now, u, flag,
		controlplane.FlagUpdate{Filters: filters})
	if err != nil {
		return nil, err
	}
	reason := fmt.Sprintf("Started by %s at %g%%.", u.Name(), r)
	if approvedBy != "" {
		reason = fmt.Sprintf("Started by %s at %g%%, approved in change request %s.", u.Name(), r, approvedBy)
	}
	return updated, recordDecision(ctx, tx, id, controlplane.ReleaseDecision{At: now, Kind: controlplane.DecisionStarted,
		Reason: reason})
}

// lockWaitingPlan locks the active plan whose advance waits for the change request, if any:
// a vote locks it before applying the request's change to the flag, in the order the plan
// evaluator locks them (the plan, then the flag), so the two never deadlock.
func lockWaitingPlan(ctx context.Context, tx pgx.Tx, requestID string) error {
	_, err := tx.Exec(ctx, `SELECT 1 FROM release_plans WHERE waiting_change_request_id = $1::uuid
		AND state IN ('running', 'paused') FOR UPDATE`, requestID)
	return err
}

// settleWaitingPlan settles the active plan whose advance waits for the request c, now in a
// final state: applied, the flag is at the next step's rollout, so the plan is too (its step
// starts now); rejected, expired or failed, the plan pauses, saying why, until a person
// resumes it (which asks again) or cancels it.
func settleWaitingPlan(ctx context.Context, tx pgx.Tx, c *controlplane.ChangeRequest) error {
	var id int64
	var step int
	var stepsJSON []byte
	err := tx.QueryRow(ctx, `SELECT id, step, steps FROM release_plans WHERE waiting_change_request_id = $1::uuid
		AND state IN ('running', 'paused') FOR UPDATE`, c.ID).Scan(&id, &step, &stepsJSON)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	var steps []controlplane.ReleaseStep
	if err := json.Unmarshal(stepsJSON, &steps); err != nil {
		return fmt.Errorf("release plan %d: %w", id, err)
	}
	d := controlplane.ReleaseDecision{Step: step}
	sql := `UPDATE release_plans SET state = 'paused', waiting_change_request_id = NULL, updated_at = clock_timestamp()
		WHERE id = $1 RETURNING updated_at`
	if next := step + 1; c.State == controlplane.StateApplied && next < len(steps) {
		d.Kind, d.Step = controlplane.DecisionAdvanced, next
		d.Reason = fmt.Sprintf("Change request %s was approved and applied: advanced to %g%%.", c.ID, steps[next].RolloutPercentage)
		sql = `UPDATE release_plans SET step = step + 1, step_started_at = clock_timestamp(), waiting_change_request_id = NULL,
			updated_at = clock_timestamp() WHERE id = $1 RETURNING updated_at`
	} else {
		d.Kind = controlplane.DecisionPaused
		d.Reason = fmt.Sprintf("Change request %s for the next step was %s", c.ID, c.State)
		if c.ApplyError != "" {
			d.Reason += " (" + c.ApplyError + ")"
		}
		d.Reason += ": the plan is paused; resume it to ask again, or cancel it."
	}
	if err := tx.QueryRow(ctx, sql, id).Scan(&d.At); err != nil {
		return err
	}
	return recordDecision(ctx, tx, id, d)
}

// awaitApproval records that the gate stopped the advance d of the claimed plan p and filed
// (or found pending) the change request of gated: the plan stays at its step and waits for
// it. A pending request that is not the plan's own (a person's change of the flag's rollout)
// is not one the plan can wait for: the plan pauses, naming it.
func awaitApproval(ctx context.Context, tx pgx.Tx, p *controlplane.ReleasePlan, d *controlplane.ReleaseDecision,
	gated *controlplane.ApprovalRequiredError) error {
	cr := gated.ChangeRequest
	if gated.Code != "approval_required" {
		d.Kind, d.Step = controlplane.DecisionPaused, p.Step
		d.Reason = fmt.Sprintf("%s The advance needs approval, but change request %s already asks to change the flag's rollout: the plan is paused until it is settled and a person resumes the plan.",
			d.Reason, cr.ID)
		if _, err := tx.Exec(ctx, `UPDATE release_plans SET state = 'paused', updated_at = $2 WHERE id = $1`, p.ID, d.At); err != nil {
			return err
		}
		return recordDecision(ctx, tx, p.ID, *d)
	}
	d.Kind, d.Step = controlplane.DecisionAwaitingApproval, p.Step
	d.Reason = fmt.Sprintf("%s The approvals gate filed change request %s for it: the plan advances once it is approved.", d.Reason, cr.ID)
	if _, err := tx.Exec(ctx, `UPDATE release_plans SET waiting_change_request_id = $2::uuid, updated_at = $3 WHERE id = $1`,
		p.ID, cr.ID, d.At); err != nil {
		return err
	}
	return recordDecision(ctx, tx, p.ID, *d)
}
