package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// MayHave exposes ActivePlans.mayHave to the external tests, which wait on what a replica's
// set knows rather than on time.
func (a *ActivePlans) MayHave(projectID int64) bool { return a.mayHave(projectID) }

// RecordPlanPoints exposes recordPlanPoints in a transaction of its own: the bound test adds
// more points than evaluations of real traffic could in a test's time.
func (s *ReleasePlanStore) RecordPlanPoints(ctx context.Context, p *controlplane.ReleasePlan, at time.Time) error {
	return s.db.inTx(ctx, func(tx pgx.Tx) error { return recordPlanPoints(ctx, tx, p, at) })
}

// CountForPlans exposes countForPlans: BenchmarkIngest/plan-read measures what each batch
// into a project without plans paid before ActivePlans let ingestion skip it.
func CountForPlans(ctx context.Context, db *DB, tx pgx.Tx, projectID int64, events []controlplane.Event) error {
	return countForPlans(ctx, tx, newPlanEligibility(db), projectID, events)
}
