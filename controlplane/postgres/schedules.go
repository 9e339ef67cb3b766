package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// ScheduleChannel is the NOTIFY channel on which a scheduled change's id is sent when it is
// created or deleted: every replica's scheduler then reads what is due next.
const ScheduleChannel = "flagedge_scheduled_change"

// ScheduleStore stores scheduled changes (controlplane.ScheduledChangeService) and hands due
// ones to the scheduler under a row lock (controlplane.ScheduledChangeQueue).
type ScheduleStore struct {
	db *DB
}

var (
	_ controlplane.ScheduledChangeService = (*ScheduleStore)(nil)
	_ controlplane.ScheduledChangeQueue   = (*ScheduleStore)(nil)
)

// NewScheduleStore returns a ScheduleStore on db.
func NewScheduleStore(db *DB) *ScheduleStore { return &ScheduleStore{db: db} }

// scheduledSelect reads changes with their creator, who counts only while a member.
var scheduledSelect = `SELECT s.id, s.project_id, s.record_id, s.model_name, s.payload, s.scheduled_at, s.executed_at,
	COALESCE(s.failure_reason, ''), s.failure_count, s.created_at, s.updated_at, ` + userSummaryJSON("cu") + `,
	COALESCE(s.change_request_id::text, '')
	FROM scheduled_changes s LEFT JOIN users cu ON cu.id = s.created_by AND cu.removed_at IS NULL`

func scanScheduled(row pgx.Row) (*controlplane.ScheduledChange, error) {
	var c controlplane.ScheduledChange
	var payload []byte
	var createdBy *userRow
	if err := row.Scan(&c.ID, &c.ProjectID, &c.RecordID, &c.ModelName, &payload, &c.ScheduledAt, &c.ExecutedAt,
		&c.FailureReason, &c.FailureCount, &c.CreatedAt, &c.UpdatedAt, &createdBy, &c.ChangeRequestID); err != nil {
		return nil, err
	}
	c.Payload, c.CreatedBy = payload, createdBy.user()
	return &c, nil
}

// FindScheduledChanges returns a page of the project's changes, latest scheduled_at first,
// and how many pass the filter, when the project is of the user's organisation: the count is
// read from the project's row of the organisation, whose absence is the project out of reach.
func (s *ScheduleStore) FindScheduledChanges(ctx context.Context, f controlplane.ScheduledChangeFilter) ([]*controlplane.ScheduledChange, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	var c conditions
	c.add("s.project_id = ?", f.ProjectID)
	if f.ModelName != nil {
		c.add("s.model_name = ?", *f.ModelName)
	}
	if f.RecordID != nil {
		c.add("s.record_id = ?", *f.RecordID)
	}
	total, err := countInReach(ctx, s.db.Pool, u, controlplane.CanReadOrg, f.ProjectID, `SELECT count(*) FROM scheduled_changes s`+c.where(), c.args...)
	if err != nil {
		return nil, 0, opError("count scheduled changes", err)
	}
	page, args := c.page(f.Limit, f.Offset)
	rows, err := s.db.Pool.Query(ctx, scheduledSelect+c.where()+` ORDER BY s.scheduled_at DESC, s.id DESC`+page, args...)
	if err != nil {
		return nil, 0, opError("find scheduled changes", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.ScheduledChange, error) { return scanScheduled(r) })
	if err != nil {
		return nil, 0, opError("find scheduled changes", err)
	}
	return list, total, nil
}

// FindScheduledChangeByID returns one change of the project, when the project is of the
// user's organisation.
func (s *ScheduleStore) FindScheduledChangeByID(ctx context.Context, projectID, id int64) (*controlplane.ScheduledChange, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	c, err := findScheduledChange(ctx, s.db.Pool, u, projectID, id, false)
	if err != nil {
		return nil, opError("find scheduled change", err)
	}
	return c, nil
}

// findScheduledChange reads a change of the project scoped by u's organisation, locked for a
// change when forUpdate: a change being applied holds its row, so the caller waits for that
// transaction and then reads the change executed.
func findScheduledChange(ctx context.Context, q querier, u *controlplane.User, projectID, id int64, forUpdate bool) (*controlplane.ScheduledChange, error) {
	return findInProject(ctx, q, u, scheduledSelect, "s", projectID, id, forUpdate, scanScheduled)
}

// CreateScheduledChange validates and stores the change and wakes the schedulers, when the
// user may change the flag (CanEditFlag, decided on the flag's row locked in the transaction).
func (s *ScheduleStore) CreateScheduledChange(ctx context.Context, projectID int64, n controlplane.NewScheduledChange) (*controlplane.ScheduledChange, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := n.Validate(); err != nil {
		return nil, refusedInput(ctx, s.db.conn(ctx), u, projectID, err)
	}
	flagID := n.FlagID() // Validate checked it; stored canonical ("007" is "7")
	var created *controlplane.ScheduledChange
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		err := lockEditableFlag(ctx, tx, u, projectID, flagID)
		if errors.Is(err, controlplane.ErrNotFound) {
			return controlplane.ErrFlagNotFound
		}
		if err != nil {
			return err
		}
		id, err := insertScheduledChange(ctx, tx, projectID, flagID, n.Payload, *n.ScheduledAt, u)
		if err != nil {
			return err
		}
		created, err = scanScheduled(tx.QueryRow(ctx, scheduledSelect+` WHERE s.id = $1`, id))
		return err
	})
	if err != nil {
		return nil, opError("create scheduled change", err)
	}
	return created, nil
}

// insertScheduledChange stores a change of a flag of the project, scheduled by u, and wakes
// the schedulers, in tx: the caller has checked that u may change the flag. ErrFlagNotFound
// when the project has no such flag (or it is deleted).
func insertScheduledChange(ctx context.Context, tx pgx.Tx, projectID, flagID int64, payload json.RawMessage,
	at time.Time, u *controlplane.User) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO scheduled_changes (project_id, record_id, model_name, payload, scheduled_at, created_by)
		SELECT f.project_id, f.id::text, $3, $4, $5, $6 FROM feature_flags f WHERE f.project_id = $1 AND f.id = $2 AND NOT f.deleted
		RETURNING id`, projectID, flagID, controlplane.ModelFeatureFlag, payload, at, u.ID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, controlplane.ErrFlagNotFound
	}
	if err != nil {
		return 0, err
	}
	return id, notifySchedulers(ctx, tx, id)
}

// UpdateScheduledChange changes a pending change and wakes the schedulers, when the user may
// change its flag. A change being applied holds its row: the update waits for that
// transaction and then finds it executed.
func (s *ScheduleStore) UpdateScheduledChange(ctx context.Context, projectID, id int64, upd controlplane.ScheduledChangeUpdate) (*controlplane.ScheduledChange, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	var updated *controlplane.ScheduledChange
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		c, err := findScheduledChange(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		if err := lockEditableFlag(ctx, tx, u, projectID, c.FlagID()); err != nil {
			return err
		}
		if err := upd.Validate(); err != nil {
			return err
		}
		if !c.Pending() {
			return controlplane.ErrScheduledChangeDone
		}
		if _, err := tx.Exec(ctx, `UPDATE scheduled_changes SET payload = COALESCE($3, payload), scheduled_at = COALESCE($4, scheduled_at),
			next_attempt_at = NULL, failure_count = 0, failure_reason = NULL, updated_at = clock_timestamp()
			WHERE project_id = $1 AND id = $2`, projectID, id, upd.Payload, upd.ScheduledAt); err != nil {
			return err
		}
		if err := notifySchedulers(ctx, tx, id); err != nil {
			return err
		}
		updated, err = scanScheduled(tx.QueryRow(ctx, scheduledSelect+` WHERE s.id = $1`, id))
		return err
	})
	if err != nil {
		return nil, opError("update scheduled change", err)
	}
	return updated, nil
}

// DeleteScheduledChange deletes the change and wakes the schedulers, when the user may change
// its flag or the flag is gone. A change being applied holds its row: the delete waits for
// that transaction and then deletes the executed record.
func (s *ScheduleStore) DeleteScheduledChange(ctx context.Context, projectID, id int64) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		c, err := findScheduledChange(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		if err := lockEditableFlag(ctx, tx, u, projectID, c.FlagID()); err != nil && !errors.Is(err, controlplane.ErrNotFound) {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM scheduled_changes WHERE project_id = $1 AND id = $2`, projectID, id); err != nil {
			return err
		}
		return notifySchedulers(ctx, tx, id)
	})
	if err != nil {
		return opError("delete scheduled change", err)
	}
	return nil
}

func notifySchedulers(ctx context.Context, tx pgx.Tx, id int64) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ScheduleChannel, strconv.FormatInt(id, 10))
	return err
}

// dueAt is when a pending change is due: at its next attempt after a transient failure.
const dueAt = `COALESCE(next_attempt_at, scheduled_at)`

// NextDue returns how long until the earliest pending change is due, on the database's clock
// (so that replicas with skewed clocks agree).
func (s *ScheduleStore) NextDue(ctx context.Context) (time.Duration, bool, error) {
	var seconds *float64
	err := s.db.Pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM (min(`+dueAt+`) - clock_timestamp()))::float8
		FROM scheduled_changes WHERE executed_at IS NULL AND change_request_id IS NULL`).Scan(&seconds)
	if err != nil {
		return 0, false, opError("next scheduled change", err)
	}
	if seconds == nil {
		return 0, false, nil
	}
	return time.Duration(*seconds * float64(time.Second)), true, nil
}

// RunDue claims the earliest due change (SELECT … FOR UPDATE SKIP LOCKED: a change another
// replica holds is skipped, never run twice), locks its flag so that apply reads the flag as
// it will update it, and runs apply in a savepoint of the claiming transaction; see
// controlplane.ScheduledChangeQueue for what each outcome records.
func (s *ScheduleStore) RunDue(ctx context.Context, apply func(context.Context, *controlplane.ScheduledChange) error) (*controlplane.ScheduledChange, error) {
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return nil, opError("claim scheduled change", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	c, err := scanScheduled(tx.QueryRow(ctx, scheduledSelect+` WHERE s.id = (SELECT id FROM scheduled_changes
		WHERE executed_at IS NULL AND change_request_id IS NULL AND `+dueAt+` <= clock_timestamp()
		ORDER BY `+dueAt+`, id LIMIT 1 FOR UPDATE SKIP LOCKED)`))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, opError("claim scheduled change", err)
	}
	if id := c.FlagID(); id > 0 {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM feature_flags WHERE project_id = $1 AND id = $2 FOR UPDATE`, c.ProjectID, id); err != nil {
			return nil, opError("claim scheduled change", err)
		}
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, opError("claim scheduled change", err)
	}
	applyErr := apply(withTx(ctx, sp), c)
	var gated *controlplane.ApprovalRequiredError
	switch {
	case applyErr == nil:
		err = sp.Commit(ctx)
	case errors.As(applyErr, &gated) && gated.Code == "approval_required":
		// The gate filed a change request: the change waits for it (setState settles it).
		if err = sp.Commit(ctx); err == nil {
			err = awaitChangeRequest(ctx, tx, c, gated.ChangeRequest.ID)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			return nil, opError("run scheduled change", err)
		}
		return c, nil
	case controlplane.ErrorKind(applyErr) != controlplane.Internal:
		err = sp.Rollback(ctx)
	default: // transient: nothing of this attempt stays but its count
		tx.Rollback(ctx) //nolint:errcheck // the connection is released either way
		if ctx.Err() != nil {
			return nil, applyErr
		}
		return s.recordTransient(ctx, c, applyErr)
	}
	if err == nil {
		err = finishScheduledChange(ctx, tx, c, failureReason(applyErr))
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return nil, opError("run scheduled change", err)
	}
	return c, nil
}

// awaitChangeRequest records that c waits for the change request the gate filed for it: it
// is no longer due, and says why.
func awaitChangeRequest(ctx context.Context, tx pgx.Tx, c *controlplane.ScheduledChange, requestID string) error {
	reason := "Waiting for approval: change request " + requestID
	_, err := tx.Exec(ctx, `UPDATE scheduled_changes SET change_request_id = $2::uuid, failure_reason = $3, updated_at = clock_timestamp()
		WHERE id = $1`, c.ID, requestID, reason)
	c.ChangeRequestID, c.FailureReason = requestID, reason
	return err
}

// recordTransient counts a transient failure of c and puts its next attempt off (2 s, 4 s,
// 8 s, …); the MaxScheduledFailures-th marks it failed for good. It returns the failure.
func (s *ScheduleStore) recordTransient(ctx context.Context, c *controlplane.ScheduledChange, cause error) (*controlplane.ScheduledChange, error) {
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		left := controlplane.MaxScheduledFailures - (c.FailureCount + 1)
		reason := fmt.Sprintf("Internal error, logged by the control plane (will retry automatically, %d attempts remaining)", left)
		if left <= 0 {
			reason = fmt.Sprintf("Internal error, logged by the control plane (failed after %d attempts)", controlplane.MaxScheduledFailures)
		}
		delay := time.Duration(1<<min(c.FailureCount+1, 6)) * time.Second
		err := tx.QueryRow(ctx, `UPDATE scheduled_changes SET failure_count = failure_count + 1, failure_reason = $2,
			next_attempt_at = clock_timestamp() + $3 * interval '1 microsecond', updated_at = clock_timestamp()
			WHERE id = $1 AND executed_at IS NULL RETURNING failure_count`, c.ID, reason, delay.Microseconds()).Scan(&c.FailureCount)
		if err != nil {
			return notFoundIfNoRows(err) // deleted meanwhile
		}
		c.FailureReason = reason
		if left <= 0 {
			return finishScheduledChange(ctx, tx, c, reason)
		}
		return nil
	})
	if err != nil && controlplane.ErrorKind(err) != controlplane.NotFound {
		return nil, errors.Join(cause, opError("record scheduled change failure", err))
	}
	return c, fmt.Errorf("scheduled change %d: %w", c.ID, cause)
}

// finishScheduledChange records the outcome of c in tx, the transaction that applied it:
// executed now (the database's clock), and failed for good when reason is not empty. It is
// the one place an outcome is written, so that what reports it (the webhooks'
// scheduled_change.executed and scheduled_change.failed events) commits with it.
func finishScheduledChange(ctx context.Context, tx pgx.Tx, c *controlplane.ScheduledChange, reason string) error {
	err := tx.QueryRow(ctx, `UPDATE scheduled_changes SET executed_at = clock_timestamp(), failure_reason = NULLIF($2, ''),
		updated_at = clock_timestamp() WHERE id = $1 RETURNING executed_at, updated_at`, c.ID, reason).Scan(&c.ExecutedAt, &c.UpdatedAt)
	if err != nil {
		return fmt.Errorf("finish scheduled change: %w", err)
	}
	c.FailureReason = reason
	kind := controlplane.EventScheduledChangeExecuted
	if reason != "" {
		kind = controlplane.EventScheduledChangeFailed
	}
	// The version that holds what the change applied (or the current one, when it failed).
	version, err := snapshotVersion(ctx, tx, c.ProjectID)
	if err != nil {
		return fmt.Errorf("finish scheduled change: %w", err)
	}
	return EnqueueWebhookEvent(ctx, tx, controlplane.WebhookEvent{ProjectID: c.ProjectID, Kind: kind, Actor: c.CreatedBy,
		SnapshotVersion: version, ObjectType: controlplane.ObjectScheduledChange, Object: c})
}

// failureReason is what a permanent failure says in failure_reason: the domain error's
// user-safe message, with the field it concerns.
func failureReason(err error) string {
	if err == nil {
		return ""
	}
	var e *controlplane.Error
	if !errors.As(err, &e) {
		return "Unknown error"
	}
	if e.Attr != "" {
		return e.Attr + ": " + e.Detail
	}
	return e.Detail
}
