package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// pointColumns are a point's columns as scanPoint reads them.
const pointColumns = `guardrail, seq, at, step, control_users, control_mean, treatment_users, treatment_mean,
	relative, estimate, lower_bound, upper_bound, regression`

// scanPoint reads pointColumns: the guardrail and its point.
func scanPoint(row pgx.Row) (int, controlplane.PlanPoint, error) {
	var g int
	var p controlplane.PlanPoint
	var estimate, lower, upper *float64
	err := row.Scan(&g, &p.Seq, &p.At, &p.Step, &p.Control.Users, &p.Control.Mean, &p.Treatment.Users, &p.Treatment.Mean,
		&p.Relative, &estimate, &lower, &upper, &p.Regression)
	if estimate != nil && lower != nil && upper != nil {
		p.Ready, p.Estimate, p.Lower, p.Upper = true, *estimate, *lower, *upper
	}
	return g, p, err
}

// recordPlanPoints adds to the history of each of the claimed plan's guardrails its state
// now, numbered after the guardrail's latest point, unless it shows the same as that one.
// Then it deletes, of the guardrail's points before the new one, those whose number is not
// a multiple of controlplane.PlanStride of the new one's: at most
// controlplane.MaxPlanPoints stay, evenly spaced over the whole plan, with the latest. The
// delete reads only the guardrail's points, at most MaxPlanPoints of them.
func recordPlanPoints(ctx context.Context, tx pgx.Tx, p *controlplane.ReleasePlan, at time.Time) error {
	rows, err := tx.Query(ctx, `SELECT DISTINCT ON (guardrail) `+pointColumns+`
		FROM release_plan_points WHERE plan_id = $1 ORDER BY guardrail, seq DESC`, p.ID)
	if err != nil {
		return err
	}
	last := map[int]controlplane.PlanPoint{}
	for rows.Next() {
		g, pt, err := scanPoint(rows)
		if err != nil {
			rows.Close()
			return err
		}
		last[g] = pt
	}
	if err := rows.Err(); err != nil {
		return err
	}
	batch := &pgx.Batch{}
	for g, r := range p.Results() {
		pt := controlplane.NewPlanPoint(at, p.Step, r)
		if prev, ok := last[g]; ok {
			if pt.SameAs(prev) {
				continue
			}
			pt.Seq = prev.Seq + 1
		}
		var estimate, lower, upper *float64
		if pt.Ready {
			estimate, lower, upper = &pt.Estimate, &pt.Lower, &pt.Upper
		}
		batch.Queue(`INSERT INTO release_plan_points (plan_id, `+pointColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
			p.ID, g, pt.Seq, pt.At, pt.Step, pt.Control.Users, pt.Control.Mean, pt.Treatment.Users, pt.Treatment.Mean,
			pt.Relative, estimate, lower, upper, pt.Regression)
		if stride := controlplane.PlanStride(pt.Seq); stride > 1 {
			batch.Queue(`DELETE FROM release_plan_points WHERE plan_id = $1 AND guardrail = $2 AND seq < $3 AND seq % $4 <> 0`,
				p.ID, g, pt.Seq, stride)
		}
	}
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, batch).Close()
}

// FindReleasePlanHistory returns the points of each of the plan's guardrails, oldest first,
// to members of the project's organisation: at most controlplane.MaxPlanPoints a guardrail.
func (s *ReleasePlanStore) FindReleasePlanHistory(ctx context.Context, projectID, planID int64) ([][]controlplane.PlanPoint, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	q := s.db.conn(ctx)
	var guardrails int
	err = q.QueryRow(ctx, `SELECT jsonb_array_length(r.guardrails) FROM release_plans r JOIN projects p ON p.id = r.project_id
		WHERE r.id = $1 AND r.project_id = $2 AND p.organization_id = $3`, planID, projectID, u.OrganizationID).Scan(&guardrails)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, missingInProject(ctx, q, u, projectID)
	}
	if err != nil {
		return nil, opError("find release plan history", err)
	}
	out := make([][]controlplane.PlanPoint, guardrails)
	for i := range out {
		out[i] = []controlplane.PlanPoint{}
	}
	rows, err := q.Query(ctx, `SELECT `+pointColumns+` FROM release_plan_points WHERE plan_id = $1 ORDER BY guardrail, seq`, planID)
	if err != nil {
		return nil, opError("find release plan history", err)
	}
	defer rows.Close()
	for rows.Next() {
		g, pt, err := scanPoint(rows)
		if err != nil {
			return nil, opError("find release plan history", err)
		}
		if g >= 0 && g < len(out) {
			out[g] = append(out[g], pt)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, opError("find release plan history", err)
	}
	return out, nil
}
