package postgres_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

// TestStaticCohortAddsRaceIngestion adds distinct ids to a static cohort while ingestion
// stores events of the same users, from several goroutines at once: every call succeeds,
// each user ends up one person with its one distinct id, every one a member, and no person is
// left without a distinct id. Without the ingest lock that the add takes, creating a person
// for a distinct id that a concurrent batch creates fails on the distinct id's uniqueness.
func TestStaticCohortAddsRaceIngestion(t *testing.T) {
	t.Parallel()
	db, res, _ := mustOpen(t)
	ctx := controlplane.NewContextWithUser(context.Background(), &mustKey(t, db, res.PersonalAPIKey).User)
	cohorts := postgres.NewCohortService(db)
	cohort, err := cohorts.CreateCohort(ctx, res.ProjectID, controlplane.CohortUpdate{Name: ptr("race"), IsStatic: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	store := postgres.NewEventStore(db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Each round's users are new, so that the add and the batch both create them.
	const rounds, perRound = 16, 100
	const users = rounds * perRound
	ids := func(round int) []string {
		out := make([]string, perRound)
		for i := range out {
			out[i] = fmt.Sprintf("racer-%d-%d", round, i)
		}
		return out
	}
	var g errgroup.Group
	for round := range rounds {
		g.Go(func() error {
			_, err := cohorts.AddPersonsToStaticCohort(ctx, res.ProjectID, cohort.ID, controlplane.StaticCohortMembers{DistinctIDs: ids(round)})
			return err
		})
		g.Go(func() error {
			now := time.Now()
			var batch []controlplane.Event
			for _, d := range ids(round) {
				batch = append(batch, controlplane.Event{UUID: uuid.NewString(), ProjectID: res.ProjectID, Name: "$pageview",
					DistinctID: d, Properties: []byte(`{}`), Timestamp: now, ReceivedAt: now})
			}
			_, err := store.Ingest(context.Background(), []controlplane.EventBatch{{ProjectID: res.ProjectID, Events: batch}})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var persons, distinct, members, orphans int
	if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM persons WHERE project_id = $1),
		(SELECT count(*) FROM person_distinct_ids WHERE project_id = $1),
		(SELECT count(*) FROM cohort_people WHERE cohort_id = $2),
		(SELECT count(*) FROM persons p WHERE NOT EXISTS (SELECT 1 FROM person_distinct_ids d WHERE d.person_id = p.id))`,
		res.ProjectID, cohort.ID).Scan(&persons, &distinct, &members, &orphans); err != nil {
		t.Fatal(err)
	}
	if persons != users || distinct != users || members != users || orphans != 0 {
		t.Errorf("%d persons, %d distinct ids, %d members, %d persons without a distinct id; want %d, %d, %d, 0",
			persons, distinct, members, orphans, users, users, users)
	}
}
