package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// EventReader reads what ingestion stored: events, persons and groups (the read API).
type EventReader struct {
	db *DB
}

var _ controlplane.EventReader = (*EventReader)(nil)

// NewEventReader returns an EventReader on db.
func NewEventReader(db *DB) *EventReader { return &EventReader{db: db} }

// conditions builds a WHERE clause from optional conditions: each "?" of a clause stands for
// that clause's one argument.
type conditions struct {
	clauses []string
	args    []any
}

func (c *conditions) add(clause string, arg any) {
	c.args = append(c.args, arg)
	c.clauses = append(c.clauses, strings.ReplaceAll(clause, "?", fmt.Sprintf("$%d", len(c.args))))
}

// addPair adds a clause whose two "?" stand for two arguments, in order.
func (c *conditions) addPair(clause string, a, b any) {
	c.args = append(c.args, a)
	clause = strings.Replace(clause, "?", fmt.Sprintf("$%d", len(c.args)), 1)
	c.args = append(c.args, b)
	c.clauses = append(c.clauses, strings.Replace(clause, "?", fmt.Sprintf("$%d", len(c.args)), 1))
}

// likeEscaper escapes LIKE's wildcards and its escape character (a backslash, LIKE's
// default), so that searched text matches literally.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// containsPattern is the LIKE pattern matching values that contain s literally.
func containsPattern(s string) string { return "%" + likeEscaper.Replace(s) + "%" }

func (c *conditions) where() string { return " WHERE " + strings.Join(c.clauses, " AND ") }

func (c *conditions) page(limit, offset int) (string, []any) {
	args := append(append([]any{}, c.args...), limit, offset)
	return fmt.Sprintf(" LIMIT $%d OFFSET $%d", len(c.args)+1, len(c.args)+2), args
}

// FindEvents returns a page of a project's events, newest first, and the total.
func (r *EventReader) FindEvents(ctx context.Context, f controlplane.EventFilter) ([]*controlplane.Event, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add("project_id = ?", f.ProjectID)
	if f.Event != "" {
		c.add("event = ?", f.Event)
	}
	if f.DistinctID != "" {
		c.add("distinct_id = ?", f.DistinctID)
	}
	if f.After != nil {
		c.add("timestamp > ?", *f.After)
	}
	if f.Before != nil {
		c.add("timestamp < ?", *f.Before)
	}
	total, err := countInReach(ctx, r.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM events`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count events", err)
	}
	limit, args := c.page(f.Limit, f.Offset)
	rows, err := r.db.Pool.Query(ctx, `SELECT uuid::text, project_id, event, distinct_id, properties, timestamp, created_at FROM events`+
		c.where()+` ORDER BY timestamp DESC, uuid`+limit, args...)
	if err != nil {
		return nil, 0, opError("find events", err)
	}
	list, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, 0, opError("find events", err)
	}
	return list, total, nil
}

func scanEvent(row pgx.CollectableRow) (*controlplane.Event, error) {
	var e controlplane.Event
	err := row.Scan(&e.UUID, &e.ProjectID, &e.Name, &e.DistinctID, &e.Properties, &e.Timestamp, &e.ReceivedAt)
	return &e, err
}

// FindEventByUUID returns one event of the project.
func (r *EventReader) FindEventByUUID(ctx context.Context, projectID int64, id string) (*controlplane.Event, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.db.Pool.Query(ctx, `SELECT uuid::text, project_id, event, distinct_id, properties, timestamp, created_at
		FROM events WHERE project_id = $1 AND uuid::text = $2 AND `+inReach("project_id", 3),
		projectID, strings.ToLower(id), reachableOrg(u, controlplane.CanReadOrg))
	if err != nil {
		return nil, opError("find event", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEvent)
	if errors.Is(err, pgx.ErrNoRows) {
		err = notFoundIn(ctx, r.db.Pool, u, controlplane.CanReadOrg, projectID)
	}
	if err != nil {
		return nil, opError("find event", err)
	}
	return e, nil
}

const personSelect = `SELECT p.id, p.uuid::text, p.properties, p.created_at,
	ARRAY(SELECT d.distinct_id FROM person_distinct_ids d WHERE d.person_id = p.id ORDER BY d.distinct_id) FROM persons p`

func scanPerson(row pgx.CollectableRow) (*controlplane.Person, error) {
	var p controlplane.Person
	err := row.Scan(&p.ID, &p.UUID, &p.Properties, &p.CreatedAt, &p.DistinctIDs)
	return &p, err
}

// FindPersons returns a page of a project's persons, newest first, and the total.
func (r *EventReader) FindPersons(ctx context.Context, f controlplane.PersonFilter) ([]*controlplane.Person, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add("p.project_id = ?", f.ProjectID)
	if f.DistinctID != "" {
		c.add("EXISTS (SELECT 1 FROM person_distinct_ids d WHERE d.person_id = p.id AND d.distinct_id = ?)", f.DistinctID)
	}
	if f.Search != "" {
		c.add(`(p.properties::text ILIKE ? OR EXISTS (SELECT 1 FROM person_distinct_ids d
			WHERE d.person_id = p.id AND d.distinct_id ILIKE ?))`, containsPattern(f.Search))
	}
	total, err := countInReach(ctx, r.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM persons p`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count persons", err)
	}
	limit, args := c.page(f.Limit, f.Offset)
	rows, err := r.db.Pool.Query(ctx, personSelect+c.where()+` ORDER BY p.id DESC`+limit, args...)
	if err != nil {
		return nil, 0, opError("find persons", err)
	}
	list, err := pgx.CollectRows(rows, scanPerson)
	if err != nil {
		return nil, 0, opError("find persons", err)
	}
	return list, total, nil
}

// FindPersonByID returns one person of the project.
func (r *EventReader) FindPersonByID(ctx context.Context, projectID, id int64) (*controlplane.Person, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.db.Pool.Query(ctx, personSelect+` WHERE p.project_id = $1 AND p.id = $2 AND `+inReach("p.project_id", 3),
		projectID, id, reachableOrg(u, controlplane.CanReadOrg))
	if err != nil {
		return nil, opError("find person", err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPerson)
	if errors.Is(err, pgx.ErrNoRows) {
		err = notFoundIn(ctx, r.db.Pool, u, controlplane.CanReadOrg, projectID)
	}
	if err != nil {
		return nil, opError("find person", err)
	}
	return p, nil
}

// FindGroups returns a page of a project's groups, newest first, and the total.
func (r *EventReader) FindGroups(ctx context.Context, f controlplane.GroupFilter) ([]*controlplane.Group, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add("project_id = ?", f.ProjectID)
	if f.TypeIndex != nil {
		c.add("group_type_index = ?", *f.TypeIndex)
	}
	if f.Search != "" {
		c.add("(group_key ILIKE ? OR properties::text ILIKE ?)", containsPattern(f.Search))
	}
	total, err := countInReach(ctx, r.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM groups`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count groups", err)
	}
	limit, args := c.page(f.Limit, f.Offset)
	rows, err := r.db.Pool.Query(ctx, `SELECT group_type_index, group_key, properties, created_at FROM groups`+
		c.where()+` ORDER BY created_at DESC, group_key`+limit, args...)
	if err != nil {
		return nil, 0, opError("find groups", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*controlplane.Group, error) {
		var g controlplane.Group
		err := row.Scan(&g.TypeIndex, &g.Key, &g.Properties, &g.CreatedAt)
		return &g, err
	})
	if err != nil {
		return nil, 0, opError("find groups", err)
	}
	return list, total, nil
}
