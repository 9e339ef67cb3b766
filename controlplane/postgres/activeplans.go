package postgres

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// PlanChannel is the NOTIFY channel on which a project's id is sent whenever one of its
// release plans starts, changes state or is deleted (triggers of migration 023).
const PlanChannel = "flagedge_release_plans"

// ActivePlans is a replica's set of the projects that have a running or paused release plan,
// kept by LISTEN on PlanChannel, so that ingesting into a project without one costs no plan
// query. Until Resync has read the set, and again from Lost until the next Resync, it knows
// nothing and every batch reads its project's plans, as if each project had one: a missed
// notification can make ingestion query for nothing, never skip a plan.
//
// A plan started on another replica is counted here from the moment its notification is
// processed: the plan's first rollout reaches SDKs through the edges after the same commit,
// so the exposures it causes arrive after it.
type ActivePlans struct {
	db *DB

	mu       sync.RWMutex // guards ready and projects
	ready    bool         // projects is complete: read after the LISTEN, every notification since applied
	projects map[int64]bool
}

// newActivePlans returns a set that knows nothing until Resync.
func newActivePlans(db *DB) *ActivePlans { return &ActivePlans{db: db} }

// Resync reads every project with an active plan. Call it once the LISTEN on PlanChannel is
// in place, and again whenever that connection was lost.
func (a *ActivePlans) Resync(ctx context.Context) error {
	a.Lost()
	rows, err := a.db.Pool.Query(ctx, `SELECT DISTINCT project_id FROM release_plans WHERE state IN ('running', 'paused')`)
	if err != nil {
		return fmt.Errorf("read active release plans: %w", err)
	}
	projects := map[int64]bool{}
	var id int64
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("read active release plans: %w", err)
		}
		projects[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read active release plans: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.projects, a.ready = projects, true
	return nil
}

// Notify handles a notification on PlanChannel: it reads again whether the project named
// has an active plan. Notifications are handled in order, each read after its commit, so
// the set ends as the last commit left it. An error leaves the set unsure of the project:
// the caller (Listen) reconnects and resyncs.
func (a *ActivePlans) Notify(ctx context.Context, payload string) error {
	projectID, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		return fmt.Errorf("release plan notification %q: %w", payload, err)
	}
	var active bool
	if err := a.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM release_plans WHERE project_id = $1 AND state IN ('running', 'paused'))`,
		projectID).Scan(&active); err != nil {
		a.Lost()
		return fmt.Errorf("read active release plans of project %d: %w", projectID, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ready {
		return nil // the next Resync reads everything
	}
	if active {
		a.projects[projectID] = true
	} else {
		delete(a.projects, projectID)
	}
	return nil
}

// Lost says notifications can no longer be trusted to arrive (the LISTEN connection is
// lost): until the next Resync, every batch reads its project's plans.
func (a *ActivePlans) Lost() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready, a.projects = false, nil
}

// mayHave reports whether the project may have an active plan: false only when the set is
// known and the project is not in it.
func (a *ActivePlans) mayHave(projectID int64) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return !a.ready || a.projects[projectID]
}
