package postgres

import (
	"context"
	"maps"
	"slices"
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

// PersonsToEvaluate returns, sorted, which of ids deciding eligibility for plan planID reads
// the stored person of and so evaluates: those with a person whom no arm of the plan holds.
func PersonsToEvaluate(ctx context.Context, db *DB, projectID, planID int64, ids []string) ([]string, error) {
	var out []string
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		persons, err := storedPersons(ctx, tx, projectID, planID, ids)
		out = slices.Sorted(maps.Keys(persons))
		return err
	})
	return out, err
}
