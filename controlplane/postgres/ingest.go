package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/personview"
)

// EventStore stores captured events, applies them to persons and groups, and counts them for
// the release plans of their project.
type EventStore struct {
	db    *DB
	log   *slog.Logger
	plans *ActivePlans
	// eligibility decides which users exposed to a release plan's flag were eligible for it.
	eligibility *planEligibility
}

var _ controlplane.EventStore = (*EventStore)(nil)

// NewEventStore returns an EventStore on db. It reads each batch's project's release plans
// until its ActivePlans is kept by a listener.
func NewEventStore(db *DB, log *slog.Logger) *EventStore {
	return &EventStore{db: db, log: log, plans: newActivePlans(db), eligibility: newPlanEligibility(db)}
}

// ActivePlans returns the set of projects with an active release plan that the store skips
// the others by: the caller keeps it with Listen on PlanChannel (Notify, Resync, Lost).
func (s *EventStore) ActivePlans() *ActivePlans { return s.plans }

// ingestLockClass is the first key of the per-project advisory lock that serialises
// ingestion of one project (across control-plane replicas), so person merges never race.
const ingestLockClass = 7200001

// Ingest stores the batches in one transaction. The whole call is tried at once first
// (COPY into a temporary table, one INSERT, persons in bulk): the fast path, taken by every
// batch PostgreSQL accepts. When PostgreSQL refuses an event for its content (see
// isDataError), that transaction is rolled back and the call is stored again in a new one
// that bisects each project's events under savepoints down to the events refused on their
// own, which go to the dead-letter table; everything else is stored, in order, each uuid
// once. Any other error (connection, timeout, deadlock) fails the call, storing nothing.
func (s *EventStore) Ingest(ctx context.Context, batches []controlplane.EventBatch) (controlplane.IngestResult, error) {
	byProject := map[int64]*projectEvents{}
	var undecodable []sourcedEvent
	for _, b := range batches {
		p := byProject[b.ProjectID]
		if p == nil {
			p = &projectEvents{}
			byProject[b.ProjectID] = p
		}
		for _, e := range b.Events {
			if e.Undecodable != "" {
				undecodable = append(undecodable, sourcedEvent{b.ProjectID, e, b.EdgeID})
				continue
			}
			p.events = append(p.events, e)
			p.edges = append(p.edges, b.EdgeID)
		}
	}
	projects := make([]int64, 0, len(byProject))
	for id, p := range byProject {
		if len(p.events) > 0 {
			projects = append(projects, id)
		}
	}
	slices.Sort(projects) // lock in a fixed order: no deadlock between concurrent batches
	res, err := s.ingest(ctx, projects, byProject, undecodable, false)
	if err != nil && isDataError(err) {
		s.log.Warn("ingest: an event was refused for its content; storing the batch event by event", "err", err)
		res, err = s.ingest(ctx, projects, byProject, undecodable, true)
	}
	if err != nil {
		return controlplane.IngestResult{}, fmt.Errorf("ingest: %w", err)
	}
	return res, nil
}

// projectEvents are one project's events of an Ingest call, with the edge each came from.
type projectEvents struct {
	events []controlplane.Event
	edges  []string
}

// sourcedEvent is an event with its project and edge, as the dead-letter table records it.
type sourcedEvent struct {
	projectID int64
	event     controlplane.Event
	edgeID    string
}

// ingest stores the projects' events in one transaction: all at once, or, when careful,
// bisecting on data errors and dead-lettering the events refused alone.
func (s *EventStore) ingest(ctx context.Context, projects []int64, byProject map[int64]*projectEvents, undecodable []sourcedEvent, careful bool) (controlplane.IngestResult, error) {
	var res controlplane.IngestResult
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS ingest_events (project_id bigint, uuid uuid, event text,
			distinct_id text, properties jsonb, timestamp timestamptz, created_at timestamptz) ON COMMIT DELETE ROWS`); err != nil {
			return err
		}
		for _, u := range undecodable {
			if err := s.deadLetter(ctx, tx, u, "undecodable", u.event.Undecodable, &res); err != nil {
				return err
			}
		}
		for _, projectID := range projects {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2::int)`, ingestLockClass, projectID); err != nil {
				return err
			}
			p := byProject[projectID]
			if careful {
				if err := s.storeOrSplit(ctx, tx, projectID, p.events, p.edges, &res); err != nil {
					return fmt.Errorf("project %d: %w", projectID, err)
				}
				continue
			}
			stored, dups, err := s.ingestEvents(ctx, tx, projectID, p.events)
			if err != nil {
				return fmt.Errorf("project %d: %w", projectID, err)
			}
			res.Stored += stored
			res.Duplicates += dups
		}
		return nil
	})
	if err != nil {
		return controlplane.IngestResult{}, err
	}
	return res, nil
}

// storeOrSplit stores events under a savepoint; when PostgreSQL refuses them for their
// content it rolls back to the savepoint and stores each half the same way, in order, so
// that a single event refused alone is dead-lettered and every other event is stored.
// With k bad events among n this costs O(k log n) attempts; recursion depth is log2 n.
func (s *EventStore) storeOrSplit(ctx context.Context, tx pgx.Tx, projectID int64, events []controlplane.Event, edges []string, res *controlplane.IngestResult) error {
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return err
	}
	stored, dups, err := s.ingestEvents(ctx, sp, projectID, events)
	if err == nil {
		if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
			return err
		}
		res.Stored += stored
		res.Duplicates += dups
		return nil
	}
	if rbErr := sp.Rollback(ctx); rbErr != nil { // ROLLBACK TO SAVEPOINT
		return errors.Join(err, rbErr)
	}
	if !isDataError(err) {
		return err
	}
	if len(events) == 1 {
		code, reason := describeDataError(err)
		return s.deadLetter(ctx, tx, sourcedEvent{projectID, events[0], edges[0]}, code, reason, res)
	}
	mid := len(events) / 2
	if err := s.storeOrSplit(ctx, tx, projectID, events[:mid], edges[:mid], res); err != nil {
		return err
	}
	return s.storeOrSplit(ctx, tx, projectID, events[mid:], edges[mid:], res)
}

// ingestSQL stores the events of the temporary table for the project $1 in one statement:
// inserted once by uuid, and each one newly stored queued for every enabled event
// destination of the project (a project without one pays an empty join). A project that does
// not store its events (store_events off) only queues them, once per uuid while queued; an
// unknown project is taken as storing, so its events meet the foreign key and are
// dead-lettered. It returns the uuids of the events that are new: those persons and groups
// are then updated for.
const ingestSQL = `WITH keep AS (SELECT COALESCE((SELECT store_events FROM projects WHERE id = $1), true) AS store),
	stored AS (INSERT INTO events (project_id, uuid, event, distinct_id, properties, timestamp, created_at)
		SELECT DISTINCT ON (uuid) project_id, uuid, event, distinct_id, properties, timestamp, created_at FROM ingest_events
		WHERE (SELECT store FROM keep)
		ON CONFLICT (project_id, uuid) DO NOTHING RETURNING uuid, event, distinct_id, properties, timestamp),
	fresh AS (SELECT * FROM stored
		UNION ALL
		SELECT DISTINCT ON (uuid) uuid, event, distinct_id, properties, timestamp FROM ingest_events WHERE NOT (SELECT store FROM keep)),
	queued AS (INSERT INTO event_forward_queue (destination_id, uuid, event, distinct_id, properties, timestamp)
		SELECT d.id, f.uuid, f.event, f.distinct_id, f.properties, f.timestamp
		FROM event_destinations d CROSS JOIN fresh f WHERE d.project_id = $1 AND d.enabled
		ON CONFLICT (destination_id, uuid) DO NOTHING)
	SELECT uuid::text FROM fresh`

// ingestEvents stores one project's events (the caller holds the project's ingest lock):
// COPY into the temporary table, one statement that inserts the uuids not yet stored and
// queues them for the project's event destinations (ingestSQL), then persons and groups for
// the newly stored ones.
func (s *EventStore) ingestEvents(ctx context.Context, tx pgx.Tx, projectID int64, events []controlplane.Event) (int, int, error) {
	for i := range events {
		if err := checkEncodable(&events[i]); err != nil {
			return 0, 0, err
		}
	}
	if _, err := tx.Exec(ctx, `TRUNCATE ingest_events`); err != nil {
		return 0, 0, err
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"ingest_events"},
		[]string{"project_id", "uuid", "event", "distinct_id", "properties", "timestamp", "created_at"},
		pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
			e := &events[i]
			return []any{projectID, e.UUID, e.Name, e.DistinctID, []byte(e.Properties), e.Timestamp, e.ReceivedAt}, nil
		}))
	if err != nil {
		return 0, 0, fmt.Errorf("copy events: %w", err)
	}
	rows, err := tx.Query(ctx, ingestSQL, projectID)
	if err != nil {
		return 0, 0, fmt.Errorf("insert events: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, 0, fmt.Errorf("insert events: %w", err)
	}
	isNew := make(map[string]bool, len(inserted))
	for _, u := range inserted {
		isNew[u] = true
	}
	var fresh []controlplane.Event
	for _, e := range events {
		if isNew[e.UUID] {
			fresh = append(fresh, e)
			delete(isNew, e.UUID) // a uuid repeated within the batch applies once
		}
	}
	if err := ensurePersons(ctx, tx, projectID, fresh); err != nil {
		return 0, 0, err
	}
	if s.plans.mayHave(projectID) {
		if err := countForPlans(ctx, tx, s.eligibility, projectID, fresh); err != nil {
			return 0, 0, err
		}
	}
	var special []personview.Event
	for _, e := range fresh {
		ie := personview.Event{Name: e.Name, DistinctID: e.DistinctID, Properties: e.Properties}
		if personview.NeedsState(ie) {
			special = append(special, ie)
		}
	}
	if len(special) > 0 {
		if err := s.applyState(ctx, tx, projectID, special); err != nil {
			return 0, 0, err
		}
	}
	return len(inserted), len(events) - len(inserted), nil
}

// ensurePersons gives every distinct id of the events a person, creating the missing ones
// in one statement.
func ensurePersons(ctx context.Context, tx pgx.Tx, projectID int64, events []controlplane.Event) error {
	if len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.DistinctID
	}
	_, err := createMissingPersons(ctx, tx, projectID, ids)
	return err
}

// createMissingPersons creates an empty person for every distinct id among ids that the
// project lacks, in one statement, and returns how many it created. The caller holds the
// project's ingest lock (ingestLockClass), so no other transaction stores one of them meanwhile.
func createMissingPersons(ctx context.Context, tx pgx.Tx, projectID int64, ids []string) (int, error) {
	tag, err := tx.Exec(ctx, `
		WITH wanted AS (SELECT DISTINCT unnest($2::text[]) AS d),
		missing AS (SELECT d, nextval(pg_get_serial_sequence('persons', 'id')) AS id FROM wanted w
			WHERE NOT EXISTS (SELECT 1 FROM person_distinct_ids x WHERE x.project_id = $1 AND x.distinct_id = w.d)),
		created AS (INSERT INTO persons (id, project_id) SELECT id, $1 FROM missing)
		INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) SELECT $1, d, id FROM missing`, projectID, ids)
	if err != nil {
		return 0, fmt.Errorf("ensure persons: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// applyState loads the persons and groups the events touch, applies the events in order and
// writes the changes back.
func (s *EventStore) applyState(ctx context.Context, tx pgx.Tx, projectID int64, events []personview.Event) error {
	view := personview.NewView()
	var ids []string
	var groupRefs []personview.GroupRef
	for _, e := range events {
		d, g := personview.Refs(e)
		ids = append(ids, d...)
		groupRefs = append(groupRefs, g...)
	}
	loaded, err := loadPersons(ctx, tx, projectID, ids, view)
	if err != nil {
		return err
	}
	if err := loadGroups(ctx, tx, projectID, groupRefs, view); err != nil {
		return err
	}
	for _, e := range events {
		view.Apply(e)
	}
	if view.Ignored > 0 {
		s.log.Warn("group identify ignored: the project has 5 group types already", "project", projectID, "events", view.Ignored)
	}
	return writeState(ctx, tx, projectID, view, loaded)
}

// loadPersons fills the view with the persons behind ids and all their distinct ids, and
// returns the stored mapping of distinct ids to person ids.
func loadPersons(ctx context.Context, tx pgx.Tx, projectID int64, ids []string, view *personview.View) (map[string]int64, error) {
	rows, err := tx.Query(ctx, `
		SELECT p.id, p.properties, p.is_identified FROM persons p
		WHERE p.id IN (SELECT person_id FROM person_distinct_ids WHERE project_id = $1 AND distinct_id = ANY($2))`, projectID, ids)
	if err != nil {
		return nil, fmt.Errorf("load persons: %w", err)
	}
	persons := map[int64]*personview.Person{}
	var personIDs []int64
	for rows.Next() {
		p := &personview.Person{}
		var props []byte
		if err := rows.Scan(&p.ID, &props, &p.Identified); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load persons: %w", err)
		}
		if err := json.Unmarshal(props, &p.Properties); err != nil || p.Properties == nil {
			p.Properties = map[string]any{}
		}
		persons[p.ID] = p
		personIDs = append(personIDs, p.ID)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load persons: %w", err)
	}
	loaded := map[string]int64{}
	rows, err = tx.Query(ctx, `SELECT distinct_id, person_id FROM person_distinct_ids WHERE project_id = $1 AND person_id = ANY($2)`,
		projectID, personIDs)
	if err != nil {
		return nil, fmt.Errorf("load distinct ids: %w", err)
	}
	for rows.Next() {
		var d string
		var id int64
		if err := rows.Scan(&d, &id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load distinct ids: %w", err)
		}
		loaded[d] = id
		view.ByDistinctID[d] = persons[id]
		persons[id].DistinctIDs = append(persons[id].DistinctIDs, d)
	}
	return loaded, rows.Err()
}

func loadGroups(ctx context.Context, tx pgx.Tx, projectID int64, refs []personview.GroupRef, view *personview.View) error {
	rows, err := tx.Query(ctx, `SELECT group_type, group_type_index FROM group_type_mappings WHERE project_id = $1`, projectID)
	if err != nil {
		return fmt.Errorf("load group types: %w", err)
	}
	for rows.Next() {
		var name string
		var index int
		if err := rows.Scan(&name, &index); err != nil {
			rows.Close()
			return err
		}
		view.GroupTypes[name] = index
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var indexes []int32
	var keys []string
	for _, r := range refs {
		if index, ok := view.GroupTypes[r.Type]; ok {
			indexes, keys = append(indexes, int32(index)), append(keys, r.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err = tx.Query(ctx, `SELECT g.group_type_index, g.group_key, g.properties FROM groups g
		JOIN unnest($2::int[], $3::text[]) AS want(idx, key) ON g.group_type_index = want.idx AND g.group_key = want.key
		WHERE g.project_id = $1`, projectID, indexes, keys)
	if err != nil {
		return fmt.Errorf("load groups: %w", err)
	}
	for rows.Next() {
		var k personview.GroupKey
		var props []byte
		if err := rows.Scan(&k.TypeIndex, &k.Key, &props); err != nil {
			rows.Close()
			return err
		}
		g := &personview.Group{Exists: true}
		if err := json.Unmarshal(props, &g.Properties); err != nil || g.Properties == nil {
			g.Properties = map[string]any{}
		}
		view.Groups[k] = g
	}
	return rows.Err()
}

// writeState writes the view's changes: new persons, distinct ids that moved, merged persons
// (their cohorts and overrides moving to the survivor), properties, groups and group types.
func writeState(ctx context.Context, tx pgx.Tx, projectID int64, view *personview.View, loaded map[string]int64) error {
	all := distinctPersons(view)
	if err := createPersons(ctx, tx, projectID, all); err != nil {
		return err
	}
	if err := mergePersons(ctx, tx, view); err != nil {
		return err
	}
	if err := assignDistinctIDs(ctx, tx, projectID, view, loaded); err != nil {
		return err
	}
	if err := updatePersonProperties(ctx, tx, all); err != nil {
		return err
	}
	return writeGroups(ctx, tx, projectID, view)
}

// survivor is the person p was merged into, through any chain of merges (p when none).
func survivor(p *personview.Person) *personview.Person {
	for p.MergedInto != nil {
		p = p.MergedInto
	}
	return p
}

// distinctPersons lists every person of the view once.
func distinctPersons(view *personview.View) []*personview.Person {
	seen := map[*personview.Person]bool{}
	var all []*personview.Person
	for _, p := range view.ByDistinctID {
		if !seen[p] {
			seen[p] = true
			all = append(all, p)
		}
	}
	return all
}

// createPersons stores the new persons that survive, giving them their ids.
func createPersons(ctx context.Context, tx pgx.Tx, projectID int64, all []*personview.Person) error {
	for _, p := range all {
		if p.ID == 0 && p.MergedInto == nil {
			if err := tx.QueryRow(ctx, `INSERT INTO persons (project_id) VALUES ($1) RETURNING id`, projectID).Scan(&p.ID); err != nil {
				return fmt.Errorf("create person: %w", err)
			}
		}
	}
	return nil
}

// mergePersons moves what belonged to each merged, stored person (static cohort memberships,
// hash-key overrides, distinct ids) to its survivor, then deletes it.
func mergePersons(ctx context.Context, tx pgx.Tx, view *personview.View) error {
	for _, p := range view.Merged {
		if p.ID == 0 {
			continue // never stored
		}
		into := survivor(p).ID
		for _, sql := range []string{
			`INSERT INTO cohort_people (cohort_id, person_id) SELECT cohort_id, $2 FROM cohort_people WHERE person_id = $1 ON CONFLICT DO NOTHING`,
			`INSERT INTO hash_key_overrides (project_id, person_id, feature_flag_key, hash_key)
				SELECT project_id, $2, feature_flag_key, hash_key FROM hash_key_overrides WHERE person_id = $1 ON CONFLICT DO NOTHING`,
			`UPDATE person_distinct_ids SET person_id = $2 WHERE person_id = $1`,
		} {
			if _, err := tx.Exec(ctx, sql, p.ID, into); err != nil {
				return fmt.Errorf("merge persons: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM persons WHERE id = $1`, p.ID); err != nil {
			return fmt.Errorf("merge persons: %w", err)
		}
	}
	return nil
}

// assignDistinctIDs points every distinct id whose person changed (new, aliased, merged) at
// its surviving person, in one statement.
func assignDistinctIDs(ctx context.Context, tx pgx.Tx, projectID int64, view *personview.View, loaded map[string]int64) error {
	var ids []string
	var persons []int64
	for d, p := range view.ByDistinctID {
		if s := survivor(p); loaded[d] != s.ID {
			ids, persons = append(ids, d), append(persons, s.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO person_distinct_ids (project_id, distinct_id, person_id)
		SELECT $1, d, p FROM unnest($2::text[], $3::bigint[]) AS m(d, p)
		ON CONFLICT (project_id, distinct_id) DO UPDATE SET person_id = EXCLUDED.person_id`, projectID, ids, persons); err != nil {
		return fmt.Errorf("assign distinct ids: %w", err)
	}
	return nil
}

// updatePersonProperties writes the properties of the persons that changed, in one statement.
func updatePersonProperties(ctx context.Context, tx pgx.Tx, all []*personview.Person) error {
	var ids []int64
	var props [][]byte
	var identified []bool
	for _, p := range all {
		if p.MergedInto != nil || !p.Dirty {
			continue
		}
		raw, err := json.Marshal(p.Properties)
		if err != nil {
			return err
		}
		ids, props, identified = append(ids, p.ID), append(props, raw), append(identified, p.Identified)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE persons SET properties = u.props, is_identified = u.ident, updated_at = now()
		FROM unnest($1::bigint[], $2::jsonb[], $3::bool[]) AS u(id, props, ident) WHERE persons.id = u.id`,
		ids, props, identified); err != nil {
		return fmt.Errorf("update persons: %w", err)
	}
	return nil
}

// writeGroups adds new group types (which edges learn from a new snapshot) and upserts the
// groups that changed.
func writeGroups(ctx context.Context, tx pgx.Tx, projectID int64, view *personview.View) error {
	if len(view.NewGroupTypes) > 0 {
		for _, name := range view.NewGroupTypes {
			if _, err := tx.Exec(ctx, `INSERT INTO group_type_mappings (project_id, group_type, group_type_index) VALUES ($1, $2, $3)`,
				projectID, name, view.GroupTypes[name]); err != nil {
				return fmt.Errorf("add group type: %w", err)
			}
		}
		if err := bumpSnapshot(ctx, tx, projectID); err != nil {
			return err
		}
	}
	for k, g := range view.Groups {
		if !g.Dirty {
			continue
		}
		raw, err := json.Marshal(g.Properties)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO groups (project_id, group_type_index, group_key, properties) VALUES ($1, $2, $3, $4)
			ON CONFLICT (project_id, group_type_index, group_key) DO UPDATE SET properties = EXCLUDED.properties, updated_at = now()`,
			projectID, k.TypeIndex, k.Key, raw); err != nil {
			return fmt.Errorf("upsert group: %w", err)
		}
	}
	return nil
}
