package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// EventDestinationService stores a project's event destinations and the events they refused,
// for the admins of the project's organisation.
type EventDestinationService struct {
	db *DB
}

var _ controlplane.EventDestinationService = (*EventDestinationService)(nil)

// NewEventDestinationService returns an EventDestinationService on db.
func NewEventDestinationService(db *DB) *EventDestinationService {
	return &EventDestinationService{db: db}
}

// destinationSelect reads destinations with their queue's size and oldest entry (the queue's
// primary key gives both from an index).
var destinationSelect = `SELECT d.id, d.project_id, d.url, d.api_key, d.enabled, d.paused_reason, d.last_error,
	d.sent_events, d.last_sent_at, q.n, q.oldest, d.created_at, d.updated_at, ` + userSummaryJSON("u") + `
	FROM event_destinations d LEFT JOIN users u ON u.id = d.created_by
	CROSS JOIN LATERAL (SELECT count(*) AS n, min(queued_at) AS oldest FROM event_forward_queue WHERE destination_id = d.id) q`

func scanDestination(row pgx.CollectableRow) (*controlplane.EventDestination, error) {
	var d controlplane.EventDestination
	var creator *userRow
	err := row.Scan(&d.ID, &d.ProjectID, &d.URL, &d.APIKey, &d.Enabled, &d.PausedReason, &d.LastError,
		&d.SentEvents, &d.LastSentAt, &d.Queued, &d.OldestQueuedAt, &d.CreatedAt, &d.UpdatedAt, &creator)
	d.CreatedBy = creator.user()
	return &d, err
}

// FindEventDestinations returns a page of the project's destinations, oldest first, and the
// total.
func (s *EventDestinationService) FindEventDestinations(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.EventDestination, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	list, total, err := pageInReach(ctx, s.db.Pool, u, controlplane.CanAdminOrg, "event_destinations", destinationSelect, "d", projectID, limit, offset, scanDestination)
	if err != nil {
		return nil, 0, opError("find event destinations", err)
	}
	return list, total, nil
}

// FindEventDestinationByID returns one destination of the project.
func (s *EventDestinationService) FindEventDestinationByID(ctx context.Context, projectID, id int64) (*controlplane.EventDestination, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	return findDestination(ctx, s.db.Pool, u, projectID, id, false)
}

// findDestination reads a destination of the project, when u administers the project's
// organisation.
func findDestination(ctx context.Context, q dbConn, u *controlplane.User, projectID, id int64, forUpdate bool) (*controlplane.EventDestination, error) {
	lock := ""
	if forUpdate {
		lock = ` FOR NO KEY UPDATE OF d`
	}
	d, err := findInReach(ctx, q, u, controlplane.CanAdminOrg, destinationSelect, "d", lock, projectID, id, scanDestination)
	if err != nil {
		return nil, opError("find event destination", err)
	}
	return d, nil
}

// CreateEventDestination validates and stores a destination; a project holds at most
// controlplane.MaxDestinationsPerProject. The user ctx acts as is its creator.
func (s *EventDestinationService) CreateEventDestination(ctx context.Context, projectID int64, upd controlplane.EventDestinationUpdate) (*controlplane.EventDestination, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(true); err != nil {
		return nil, err
	}
	d := &controlplane.EventDestination{Enabled: true}
	upd.Apply(d)
	var created *controlplane.EventDestination
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		// The project row serialises concurrent creations, so the limit holds; its
		// organisation says who may add to it.
		var orgID int64
		var n int
		err := tx.QueryRow(ctx, `SELECT p.organization_id, (SELECT count(*) FROM event_destinations WHERE project_id = p.id)
			FROM projects p WHERE p.id = $1 FOR NO KEY UPDATE`, projectID).Scan(&orgID, &n)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !controlplane.CanAdminOrg(actor, orgID)) {
			return controlplane.ErrPermissionDenied
		}
		if err != nil {
			return err
		}
		if n >= controlplane.MaxDestinationsPerProject {
			return controlplane.FieldError("url", "max_event_destinations",
				fmt.Sprintf("A project has at most %d event destinations.", controlplane.MaxDestinationsPerProject))
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO event_destinations (project_id, url, api_key, enabled, created_by)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, projectID, d.URL, d.APIKey, d.Enabled, actor.ID).Scan(&id); err != nil {
			return err
		}
		created, err = findDestination(ctx, tx, actor, projectID, id, false)
		return err
	})
	if err != nil {
		return nil, opError("create event destination", err)
	}
	return created, nil
}

// UpdateEventDestination applies a partial update. Any update resumes a paused destination
// and lets it be tried at once.
func (s *EventDestinationService) UpdateEventDestination(ctx context.Context, projectID, id int64, upd controlplane.EventDestinationUpdate) (*controlplane.EventDestination, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(false); err != nil {
		return nil, err
	}
	var updated *controlplane.EventDestination
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		d, err := findDestination(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		upd.Apply(d)
		if _, err := tx.Exec(ctx, `UPDATE event_destinations SET url = $2, api_key = $3, enabled = $4, paused_reason = '',
			attempts = 0, next_attempt_at = now(), updated_at = now() WHERE id = $1`, id, d.URL, d.APIKey, d.Enabled); err != nil {
			return err
		}
		updated, err = findDestination(ctx, tx, u, projectID, id, false)
		return err
	})
	if err != nil {
		return nil, opError("update event destination", err)
	}
	return updated, nil
}

// DeleteEventDestination deletes a destination, its queue and its dead letters.
func (s *EventDestinationService) DeleteEventDestination(ctx context.Context, projectID, id int64) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	tag, err := s.db.Pool.Exec(ctx, `DELETE FROM event_destinations d WHERE d.project_id = $1 AND d.id = $2 AND `+inReach("d.project_id", 3),
		projectID, id, reachableOrg(u, controlplane.CanAdminOrg))
	if err == nil && tag.RowsAffected() == 0 {
		err = notFoundIn(ctx, s.db.Pool, u, controlplane.CanAdminOrg, projectID)
	}
	if err != nil {
		return opError("delete event destination", err)
	}
	return nil
}

// FindForwardDeadLetters returns a page of the events the destination refused, newest first.
func (s *EventDestinationService) FindForwardDeadLetters(ctx context.Context, projectID, destinationID int64, limit, offset int) ([]*controlplane.ForwardDeadLetter, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	if _, err := findDestination(ctx, s.db.Pool, u, projectID, destinationID, false); err != nil {
		return nil, 0, err
	}
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM event_forward_dead_letters WHERE destination_id = $1`, destinationID).Scan(&total); err != nil {
		return nil, 0, opError("count forward dead letters", err)
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT id, destination_id, uuid::text, event, status_code, error, created_at
		FROM event_forward_dead_letters WHERE destination_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3`, destinationID, limit, offset)
	if err != nil {
		return nil, 0, opError("find forward dead letters", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.ForwardDeadLetter, error) {
		var l controlplane.ForwardDeadLetter
		err := r.Scan(&l.ID, &l.DestinationID, &l.UUID, &l.Event, &l.StatusCode, &l.Error, &l.CreatedAt)
		return &l, err
	})
	if err != nil {
		return nil, 0, opError("find forward dead letters", err)
	}
	return list, total, nil
}

// SystemForwardQueue is the queue of events to forward as the dispatchers claim it: unchecked
// access to every project's queued events and its destinations' keys, for the forwarding
// dispatcher alone (see controlplane.SystemForwardQueue).
type SystemForwardQueue struct {
	db *DB
}

var _ controlplane.SystemForwardQueue = (*SystemForwardQueue)(nil)

// NewSystemForwardQueue returns the queue on db, for the forwarding dispatcher.
func NewSystemForwardQueue(db *DB) *SystemForwardQueue { return &SystemForwardQueue{db: db} }

// dueDestination is the SQL condition of a destination Claim may lease.
const dueDestination = `e.enabled AND e.paused_reason = '' AND e.next_attempt_at <= now()
	AND (e.leased_until IS NULL OR e.leased_until <= now())
	AND EXISTS (SELECT 1 FROM event_forward_queue q WHERE q.destination_id = e.id)`

// Claim leases the due destination waiting longest and reads up to n of its oldest events.
// The destination's row is taken FOR NO KEY UPDATE SKIP LOCKED, so concurrent claims of other
// replicas pass over it, and ingestion, whose queue rows take KEY SHARE on it, never waits.
func (q *SystemForwardQueue) Claim(ctx context.Context, n int, lease time.Duration) (*controlplane.ForwardBatch, error) {
	var b *controlplane.ForwardBatch
	err := q.db.inTx(ctx, func(tx pgx.Tx) error {
		claim := &controlplane.ForwardBatch{Lease: uuid.NewString()}
		err := tx.QueryRow(ctx, `UPDATE event_destinations d SET leased_until = now() + $1 * interval '1 millisecond', lease = $2
			WHERE d.id = (SELECT e.id FROM event_destinations e WHERE `+dueDestination+`
				ORDER BY e.next_attempt_at, e.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED)
			RETURNING d.id, d.project_id, d.url, d.api_key, d.attempts`, lease.Milliseconds(), claim.Lease).
			Scan(&claim.DestinationID, &claim.ProjectID, &claim.URL, &claim.APIKey, &claim.Attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, uuid::text, event, distinct_id, properties, timestamp FROM event_forward_queue
			WHERE destination_id = $1 ORDER BY seq LIMIT $2`, claim.DestinationID, n)
		if err != nil {
			return err
		}
		claim.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.ForwardEvent, error) {
			var e controlplane.ForwardEvent
			err := r.Scan(&e.Seq, &e.UUID, &e.Name, &e.DistinctID, &e.Properties, &e.Timestamp)
			return &e, err
		})
		b = claim
		return err
	})
	if err != nil {
		return nil, opError("claim forward batch", err)
	}
	return b, nil
}

// Extend renews the claim's lease, if the claim still holds it.
func (q *SystemForwardQueue) Extend(ctx context.Context, b *controlplane.ForwardBatch, lease time.Duration) (bool, error) {
	tag, err := q.db.Pool.Exec(ctx, `UPDATE event_destinations SET leased_until = now() + $3 * interval '1 millisecond'
		WHERE id = $1 AND lease = $2`, b.DestinationID, b.Lease, lease.Milliseconds())
	if err != nil {
		return false, opError("extend forward lease", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Finish deletes the events done, keeps the dead letters, and records the destination's state
// under the lease: a success resets its failures, a failure counts one and sets when to try
// again, a pause stops it until it is changed. The events done are deleted even when the lease
// was lost: they were sent.
func (q *SystemForwardQueue) Finish(ctx context.Context, b *controlplane.ForwardBatch, o controlplane.ForwardOutcome) error {
	err := q.db.inTx(ctx, func(tx pgx.Tx) error {
		if len(o.Done) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM event_forward_queue WHERE destination_id = $1 AND seq = ANY ($2)`,
				b.DestinationID, o.Done); err != nil {
				return err
			}
		}
		for _, l := range o.DeadLetters {
			if _, err := tx.Exec(ctx, `INSERT INTO event_forward_dead_letters (destination_id, uuid, event, status_code, error)
				VALUES ($1, $2, $3, $4, $5)`, b.DestinationID, l.UUID, l.Event, l.StatusCode, l.Error); err != nil {
				return err
			}
		}
		sent := len(o.Done) - len(o.DeadLetters)
		_, err := tx.Exec(ctx, `UPDATE event_destinations SET leased_until = NULL, lease = NULL,
			sent_events = sent_events + $3, last_sent_at = CASE WHEN $3 > 0 THEN now() ELSE last_sent_at END,
			attempts = CASE WHEN $4 = '' THEN 0 ELSE attempts + 1 END, last_error = $4,
			next_attempt_at = COALESCE($5, now()), paused_reason = $6
			WHERE id = $1 AND lease = $2`, b.DestinationID, b.Lease, sent, o.Error, nullTime(o.RetryAt), o.Pause)
		return err
	})
	if err != nil {
		return opError("finish forward batch", err)
	}
	return nil
}

// NextDue is when a destination with queued events may next be claimed: the earliest retry
// or end of a lease of the enabled, unpaused destinations that have events queued.
func (q *SystemForwardQueue) NextDue(ctx context.Context) (time.Time, error) {
	var t *time.Time
	err := q.db.Pool.QueryRow(ctx, `SELECT min(greatest(e.next_attempt_at, COALESCE(e.leased_until, e.next_attempt_at)))
		FROM event_destinations e WHERE e.enabled AND e.paused_reason = ''
		AND EXISTS (SELECT 1 FROM event_forward_queue q WHERE q.destination_id = e.id)`).Scan(&t)
	if err != nil {
		return time.Time{}, opError("next due forward batch", err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// Backlog counts each destination's queued events and the age of its oldest.
func (q *SystemForwardQueue) Backlog(ctx context.Context) ([]controlplane.ForwardBacklog, error) {
	rows, err := q.db.Pool.Query(ctx, `SELECT destination_id, count(*), extract(epoch FROM now() - min(queued_at))::float8
		FROM event_forward_queue GROUP BY destination_id ORDER BY destination_id`)
	if err != nil {
		return nil, opError("forward backlog", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (controlplane.ForwardBacklog, error) {
		var b controlplane.ForwardBacklog
		var age float64
		err := r.Scan(&b.DestinationID, &b.Events, &age)
		b.OldestAge = time.Duration(age * float64(time.Second))
		return b, err
	})
	if err != nil {
		return nil, opError("forward backlog", err)
	}
	return list, nil
}
