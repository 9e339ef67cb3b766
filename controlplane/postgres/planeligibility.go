package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/shared/flags"
)

// planEligibility decides, at ingestion, whether users whose exposure answered false without
// a reason that says so (controlplane.ExposureUnknown) were eligible for a plan's flag: on a
// flag without property filters everyone is; otherwise the flag alone, with the flags it
// depends on (flags.Snapshot.EvaluateFlag), is evaluated with the control plane's own engine
// and the project's current flags (compiled once per snapshot version), for each user's
// stored person properties. A user without a stored person, or missing a property the
// conditions read, is undecided. It runs under the project's ingestion lock, so a user whom
// an arm of the plan already holds is not evaluated again: no answer could move them.
type planEligibility struct {
	eval *flageval.Evaluator
}

func newPlanEligibility(db *DB) *planEligibility {
	return &planEligibility{eval: &flageval.Evaluator{Snapshots: NewSnapshotStore(db)}}
}

// forBatch returns the eligibility of one batch of the project's events: the project's
// flags are looked up at most once for all its plans.
func (e *planEligibility) forBatch(projectID int64) *batchEligibility {
	return &batchEligibility{eval: e.eval, projectID: projectID}
}

// batchEligibility decides eligibility for one batch of a project's events.
type batchEligibility struct {
	eval      *flageval.Evaluator
	projectID int64
	project   *flageval.Project // compiled on first need
}

// decide splits ids, distinct ids exposed to the flag flagKey of plan planID, into the
// eligible and the undecided; the rest are not eligible. Users an arm of the plan already
// holds are returned undecided without being evaluated: storeCounts counts no undecided user
// an arm holds, and placing them again would add nothing to the plan.
func (b *batchEligibility) decide(ctx context.Context, tx pgx.Tx, planID int64, flagKey string, ids []string) (eligible, undecided []string, err error) {
	if b.project == nil {
		if b.project, err = b.eval.Compile(ctx, b.projectID); err != nil {
			return nil, nil, err
		}
	}
	var def *flags.FlagDefinition
	for i := range b.project.Definition.Flags {
		if b.project.Definition.Flags[i].Key == flagKey {
			def = &b.project.Definition.Flags[i]
		}
	}
	switch {
	case def == nil: // not served (deleted): nothing to decide with
		return nil, ids, nil
	case !controlplane.HasPropertyFilters(def.Filters):
		return ids, nil, nil
	}
	// The snapshot is compiled from every flag of the definition: def's key is in it.
	index := b.project.Snapshot.Lookup(flagKey)
	persons, err := storedPersons(ctx, tx, b.projectID, planID, ids)
	if err != nil {
		return nil, nil, err
	}
	var results []flags.Result
	for _, id := range ids {
		person, ok := persons[id]
		if !ok {
			undecided = append(undecided, id)
			continue
		}
		// PersonLookupFailed: a property the conditions read that is not stored fails the
		// flag instead of not matching, since the SDK may have had it.
		req := flags.Request{DistinctID: id, StoredPerson: person.props, StaticCohorts: person.cohorts, PersonLookupFailed: true}
		var r flags.Result
		r, results = b.project.Snapshot.EvaluateFlag(&req, index, results)
		switch ok, known := controlplane.EligibleFor(&r); {
		case !known:
			undecided = append(undecided, id)
		case ok:
			eligible = append(eligible, id)
		}
	}
	return eligible, undecided, nil
}

// storedPerson is what deciding eligibility reads of a person.
type storedPerson struct {
	props   flags.Properties
	cohorts []int64
}

// storedPersons reads the stored properties and static cohorts of the persons of ids whom no
// arm of plan planID holds, in one statement; ids without a person, or held, are absent.
func storedPersons(ctx context.Context, tx pgx.Tx, projectID, planID int64, ids []string) (map[string]storedPerson, error) {
	rows, err := tx.Query(ctx, `SELECT d.distinct_id, p.properties,
			COALESCE((SELECT array_agg(cp.cohort_id ORDER BY cp.cohort_id) FROM cohort_people cp
				JOIN cohorts c ON c.id = cp.cohort_id WHERE cp.person_id = p.id AND NOT c.deleted), '{}')
		FROM person_distinct_ids d JOIN persons p ON p.id = d.person_id
		WHERE d.project_id = $1 AND d.distinct_id = ANY($2)
			AND NOT EXISTS (SELECT 1 FROM release_plan_units u WHERE u.plan_id = $3 AND u.distinct_id = d.distinct_id)`,
		projectID, ids, planID)
	if err != nil {
		return nil, fmt.Errorf("read persons: %w", err)
	}
	out := make(map[string]storedPerson, len(ids))
	for rows.Next() {
		var id string
		var raw []byte
		var sp storedPerson
		if err := rows.Scan(&id, &raw, &sp.cohorts); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read persons: %w", err)
		}
		if err := json.Unmarshal(raw, &sp.props); err != nil {
			rows.Close()
			return nil, fmt.Errorf("person %q: %w", id, err)
		}
		out[id] = sp
	}
	return out, rows.Err()
}

// decideUnknown decides the users of false exposures whose reason did not say whether they
// were eligible for plan p (batchEligibility.decide): it returns the eligible ones, control,
// and the undecided ones, each once (exposures of users not decided are counted once per
// user per batch), for storeCounts once the batch's arms are stored.
func decideUnknown(ctx context.Context, tx pgx.Tx, elig *batchEligibility, p activePlan,
	ids []string) (eligible map[string]bool, undecided []string, err error) {
	distinct := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, d := range ids {
		if !seen[d] {
			seen[d] = true
			distinct = append(distinct, d)
		}
	}
	list, undecided, err := elig.decide(ctx, tx, p.id, p.flagKey, distinct)
	if err != nil {
		return nil, nil, err
	}
	eligible = make(map[string]bool, len(list))
	for _, d := range list {
		eligible[d] = true
	}
	return eligible, undecided, nil
}
