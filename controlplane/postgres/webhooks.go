package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// WebhookChannel is the NOTIFY channel on which a transaction that enqueued deliveries wakes
// the dispatchers of every replica when it commits.
const WebhookChannel = "flagedge_webhook"

// WebhookService stores webhooks and the delivery log, for the admins of their projects'
// organisations.
type WebhookService struct {
	db *DB
}

var _ controlplane.WebhookService = (*WebhookService)(nil)

// NewWebhookService returns a WebhookService on db.
func NewWebhookService(db *DB) *WebhookService { return &WebhookService{db: db} }

// SystemWebhookOutbox is the outbox of deliveries as the dispatchers claim them: unchecked
// access to every project's deliveries, for the webhook dispatcher alone (see
// controlplane.SystemWebhookOutbox).
type SystemWebhookOutbox struct {
	db *DB
}

var _ controlplane.SystemWebhookOutbox = (*SystemWebhookOutbox)(nil)

// NewSystemWebhookOutbox returns the outbox on db, for the webhook dispatcher.
func NewSystemWebhookOutbox(db *DB) *SystemWebhookOutbox { return &SystemWebhookOutbox{db: db} }

var webhookSelect = `SELECT w.id, w.project_id, w.url, w.events, w.secret, w.enabled, w.created_at, w.updated_at,
	` + userSummaryJSON("u") + ` FROM webhooks w LEFT JOIN users u ON u.id = w.created_by`

func scanWebhook(row pgx.CollectableRow) (*controlplane.Webhook, error) {
	var h controlplane.Webhook
	var creator *userRow
	err := row.Scan(&h.ID, &h.ProjectID, &h.URL, &h.Events, &h.Secret, &h.Enabled, &h.CreatedAt, &h.UpdatedAt, &creator)
	h.CreatedBy = creator.user()
	return &h, err
}

// FindWebhooks returns a page of the project's hooks, oldest first, and the total.
func (s *WebhookService) FindWebhooks(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.Webhook, int, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, 0, err
	}
	list, total, err := pageInReach(ctx, s.db.Pool, u, controlplane.CanAdminOrg, "webhooks", webhookSelect, "w", projectID, limit, offset, scanWebhook)
	if err != nil {
		return nil, 0, opError("find webhooks", err)
	}
	return list, total, nil
}

// FindWebhookByID returns one hook of the project.
func (s *WebhookService) FindWebhookByID(ctx context.Context, projectID, id int64) (*controlplane.Webhook, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	return findWebhook(ctx, s.db.Pool, u, projectID, id, false)
}

// findWebhook reads a hook of the project, when u administers the project's organisation.
func findWebhook(ctx context.Context, q dbConn, u *controlplane.User, projectID, id int64, forUpdate bool) (*controlplane.Webhook, error) {
	lock := ""
	if forUpdate {
		lock = ` FOR UPDATE OF w`
	}
	h, err := findInReach(ctx, q, u, controlplane.CanAdminOrg, webhookSelect, "w", lock, projectID, id, scanWebhook)
	if err != nil {
		return nil, opError("find webhook", err)
	}
	return h, nil
}

// CreateWebhook validates and stores a hook; a project holds at most
// controlplane.MaxWebhooksPerProject. The user ctx acts as is its creator.
func (s *WebhookService) CreateWebhook(ctx context.Context, projectID int64, upd controlplane.WebhookUpdate) (*controlplane.Webhook, error) {
	actor, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(true); err != nil {
		return nil, err
	}
	h := &controlplane.Webhook{Enabled: true}
	upd.Apply(h)
	var created *controlplane.Webhook
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		// The project row serialises concurrent creations, so the limit holds (NO KEY: not
		// waiting for the key-share locks of rows other writes insert for the project); its
		// organisation says who may add to it.
		var orgID int64
		var n int
		err := tx.QueryRow(ctx, `SELECT p.organization_id, (SELECT count(*) FROM webhooks WHERE project_id = p.id) FROM projects p
			WHERE p.id = $1 FOR NO KEY UPDATE`, projectID).Scan(&orgID, &n)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !controlplane.CanAdminOrg(actor, orgID)) {
			return controlplane.ErrPermissionDenied
		}
		if err != nil {
			return err
		}
		if n >= controlplane.MaxWebhooksPerProject {
			return controlplane.FieldError("url", "max_webhooks", fmt.Sprintf("A project has at most %d webhooks.", controlplane.MaxWebhooksPerProject))
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO webhooks (project_id, url, events, secret, enabled, created_by)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, projectID, h.URL, h.Events, h.Secret, h.Enabled, actor.ID).Scan(&id); err != nil {
			return err
		}
		created, err = findWebhook(ctx, tx, actor, projectID, id, false)
		return err
	})
	if err != nil {
		return nil, opError("create webhook", err)
	}
	return created, nil
}

// UpdateWebhook applies a partial update.
func (s *WebhookService) UpdateWebhook(ctx context.Context, projectID, id int64, upd controlplane.WebhookUpdate) (*controlplane.Webhook, error) {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return nil, err
	}
	if err := upd.Validate(false); err != nil {
		return nil, err
	}
	var updated *controlplane.Webhook
	err = s.db.inTx(ctx, func(tx pgx.Tx) error {
		h, err := findWebhook(ctx, tx, u, projectID, id, true)
		if err != nil {
			return err
		}
		upd.Apply(h)
		if _, err := tx.Exec(ctx, `UPDATE webhooks SET url = $2, events = $3, secret = $4, enabled = $5, updated_at = now() WHERE id = $1`,
			id, h.URL, h.Events, h.Secret, h.Enabled); err != nil {
			return err
		}
		if h.Enabled { // deliveries held while the hook was disabled are due again
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, WebhookChannel); err != nil {
				return err
			}
		}
		updated, err = findWebhook(ctx, tx, u, projectID, id, false)
		return err
	})
	if err != nil {
		return nil, opError("update webhook", err)
	}
	return updated, nil
}

// DeleteWebhook deletes a hook with its delivery log and the deliveries not yet made.
func (s *WebhookService) DeleteWebhook(ctx context.Context, projectID, id int64) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	tag, err := s.db.Pool.Exec(ctx, `DELETE FROM webhooks w WHERE w.project_id = $1 AND w.id = $2 AND `+inReach("w.project_id", 3),
		projectID, id, reachableOrg(u, controlplane.CanAdminOrg))
	if err == nil && tag.RowsAffected() == 0 {
		err = notFoundIn(ctx, s.db.Pool, u, controlplane.CanAdminOrg, projectID)
	}
	if err != nil {
		return opError("delete webhook", err)
	}
	return nil
}

// FindDeliveries returns a page of the hook's delivery log, newest first, and the total.
func (s *WebhookService) FindDeliveries(ctx context.Context, projectID, webhookID int64, limit, offset int) ([]*controlplane.WebhookDelivery, int, error) {
	if _, err := s.FindWebhookByID(ctx, projectID, webhookID); err != nil { // the hook, when the user administers its project's organisation
		return nil, 0, err
	}
	var total int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, webhookID).Scan(&total); err != nil {
		return nil, 0, opError("count deliveries", err)
	}
	rows, err := s.db.Pool.Query(ctx, `SELECT id::text, event_id::text, webhook_id, kind, status, attempts, last_status_code, last_error,
		response_prefix, CASE WHEN status = 'pending' THEN next_attempt_at END, created_at, updated_at, delivered_at
		FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY created_at DESC, id LIMIT $2 OFFSET $3`, webhookID, limit, offset)
	if err != nil {
		return nil, 0, opError("find deliveries", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.WebhookDelivery, error) {
		var d controlplane.WebhookDelivery
		err := r.Scan(&d.ID, &d.EventID, &d.WebhookID, &d.Kind, &d.Status, &d.Attempts, &d.LastStatusCode, &d.LastError,
			&d.ResponsePrefix, &d.NextAttemptAt, &d.CreatedAt, &d.UpdatedAt, &d.DeliveredAt)
		return &d, err
	})
	if err != nil {
		return nil, 0, opError("find deliveries", err)
	}
	return list, total, nil
}

// storedEvent is the event column of a delivery: what its body is made of when it is sent.
type storedEvent struct {
	ProjectID       int64           `json:"project_id"`
	Actor           *userRow        `json:"actor"`
	SnapshotVersion int64           `json:"snapshot_version"`
	ObjectType      string          `json:"object_type"`
	Object          json.RawMessage `json:"object"`
}

// EnqueueWebhookEvent adds the event to the outbox in tx, the transaction of the write it
// reports: one delivery for each enabled hook of the project that subscribes to its kind,
// and a NOTIFY that wakes the dispatchers when tx commits. A project without such a hook
// costs one indexed query. Writes that report events call it beside their activity log entry.
func EnqueueWebhookEvent(ctx context.Context, tx pgx.Tx, ev controlplane.WebhookEvent) error {
	object, err := json.Marshal(ev.Object)
	if err != nil {
		return fmt.Errorf("enqueue webhook event: %w", err)
	}
	var actor *userRow
	if ev.Actor != nil {
		a := userRow(*ev.Actor)
		actor = &a
	}
	event, err := json.Marshal(storedEvent{ProjectID: ev.ProjectID, Actor: actor, SnapshotVersion: ev.SnapshotVersion,
		ObjectType: ev.ObjectType, Object: object})
	if err != nil {
		return fmt.Errorf("enqueue webhook event: %w", err)
	}
	_, err = tx.Exec(ctx, `WITH queued AS (
			INSERT INTO webhook_deliveries (id, event_id, webhook_id, kind, event)
			SELECT gen_random_uuid(), $2, w.id, $3, $4 FROM webhooks w
			WHERE w.project_id = $1 AND w.enabled AND $3 = ANY (w.events)
			RETURNING 1)
		SELECT pg_notify($5, '') FROM (SELECT count(*) AS n FROM queued) q WHERE q.n > 0`,
		ev.ProjectID, uuid.New(), ev.Kind, event, WebhookChannel)
	if err != nil {
		return opError("enqueue webhook event", err)
	}
	return nil
}

// nextSnapshotVersion is the project's snapshot version that the bump ending tx will make:
// it locks the project's row, so no other write takes that number first. Writes that
// enqueue an event before they bump the snapshot (once) name the version with it. The lock is
// FOR NO KEY UPDATE, the one the bump's UPDATE takes: FOR UPDATE would also wait for the
// KEY SHARE locks that rows referencing the project (an activity entry just inserted) hold,
// and two writes in one project would deadlock.
func nextSnapshotVersion(ctx context.Context, tx pgx.Tx, projectID int64) (int64, error) {
	var v int64
	err := tx.QueryRow(ctx, `SELECT snapshot_version + 1 FROM projects WHERE id = $1 FOR NO KEY UPDATE`, projectID).Scan(&v)
	return v, err
}

// leasedCount is an SQL expression for the number of deliveries under lease of the hook whose
// id is the SQL expression hook (Claim's and NextDue's measure of its share).
func leasedCount(hook string) string {
	return `(SELECT count(*) FROM webhook_deliveries l WHERE l.webhook_id = ` + hook + ` AND l.leased_until > now())`
}

// Claim leases up to n due deliveries of enabled hooks for lease: their next attempt is moved
// past it, so no other dispatcher takes them until Finish or until the lease runs out (the
// replica died mid-attempt). Hooks are served in turn (each one's earliest due delivery, then
// each one's second, ...), the hook waiting longest first, and a hook is given only what it
// lacks of perHook deliveries under lease.
//
// The cap holds across replicas: a claim first locks the rows of the hooks it will serve (FOR
// NO KEY UPDATE SKIP LOCKED, so a hook another replica is claiming for is left to it, and
// writes, whose foreign keys take KEY SHARE, do not wait), and only then counts their leases
// in a statement of its own, whose snapshot holds every lease committed by the claims that
// held those locks before.
func (s *SystemWebhookOutbox) Claim(ctx context.Context, n, perHook int, lease time.Duration) ([]*controlplane.PendingDelivery, error) {
	var list []*controlplane.PendingDelivery
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		// Hooks under their cap by this snapshot's count: a hook at its cap, which would
		// have the oldest due deliveries, must not keep the others from being locked.
		rows, err := tx.Query(ctx, `WITH due AS (
				SELECT webhook_id, min(next_attempt_at) AS since FROM webhook_deliveries
				WHERE status = 'pending' AND next_attempt_at <= now() GROUP BY webhook_id)
			SELECT w.id FROM webhooks w JOIN due ON due.webhook_id = w.id
			WHERE w.enabled AND `+leasedCount("w.id")+` < $1
			ORDER BY due.since, w.id LIMIT $2 FOR NO KEY UPDATE OF w SKIP LOCKED`, perHook, n)
		if err != nil {
			return err
		}
		hooks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(hooks) == 0 {
			return err
		}
		// The status and due time are checked again on the row updated, in case a replica
		// whose lease had run out finished it meanwhile.
		rows, err = tx.Query(ctx, `WITH taken AS (
				SELECT t.id, t.turn, t.next_attempt_at FROM unnest($1::bigint[]) AS h(id)
				CROSS JOIN LATERAL (
					SELECT d.id, d.next_attempt_at, row_number() OVER (ORDER BY d.next_attempt_at, d.id) AS turn
					FROM webhook_deliveries d
					WHERE d.webhook_id = h.id AND d.status = 'pending' AND d.next_attempt_at <= now()
					ORDER BY d.next_attempt_at, d.id
					LIMIT greatest($2 - `+leasedCount("h.id")+`, 0)) t),
			due AS (SELECT id FROM taken ORDER BY turn, next_attempt_at, id LIMIT $3)
			UPDATE webhook_deliveries d SET next_attempt_at = now() + $4 * interval '1 millisecond',
				leased_until = now() + $4 * interval '1 millisecond'
			FROM due, webhooks w WHERE d.id = due.id AND w.id = d.webhook_id AND d.status = 'pending' AND d.next_attempt_at <= now()
			RETURNING d.id::text, d.event_id::text, d.webhook_id, d.kind, w.url, w.secret, d.event, d.attempts, d.created_at`,
			hooks, perHook, n, lease.Milliseconds())
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*controlplane.PendingDelivery, error) {
			var p controlplane.PendingDelivery
			var ev storedEvent
			if err := r.Scan(&p.ID, &p.EventID, &p.WebhookID, &p.Kind, &p.URL, &p.Secret, &ev, &p.Attempts, &p.CreatedAt); err != nil {
				return nil, err
			}
			p.ProjectID, p.Actor, p.SnapshotVersion, p.ObjectType, p.Object = ev.ProjectID, ev.Actor.user(), ev.SnapshotVersion, ev.ObjectType, ev.Object
			return &p, nil
		})
		return err
	})
	if err != nil {
		return nil, opError("claim deliveries", err)
	}
	return list, nil
}

// Finish records an attempt's outcome. A delivery no longer pending (finished by a replica
// whose lease had run out before this one's) is left as it is.
func (s *SystemWebhookOutbox) Finish(ctx context.Context, id string, res controlplane.DeliveryResult) error {
	_, err := s.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = $2, attempts = attempts + 1, last_status_code = $3,
		last_error = $4, response_prefix = $5, next_attempt_at = COALESCE($6, next_attempt_at), leased_until = NULL,
		updated_at = now(), delivered_at = CASE WHEN $2 = 'delivered' THEN now() END
		WHERE id = $1 AND status = 'pending'`,
		id, res.Status, res.StatusCode, res.Error, res.ResponsePrefix, nullTime(res.NextAttemptAt))
	if err != nil {
		return opError("finish delivery", err)
	}
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// NextDue is when Claim with perHook may next find a delivery: per enabled hook, its earliest
// pending delivery if it has fewer than perHook under lease, else its earliest not yet due (a
// retry, or the end of a lease, which frees a slot if its replica died); zero when none is
// pending. A hook at its cap gets a slot back when an attempt ends, and the replica that made
// it claims again then.
func (s *SystemWebhookOutbox) NextDue(ctx context.Context, perHook int) (time.Time, error) {
	var t *time.Time
	err := s.db.Pool.QueryRow(ctx, `SELECT min(CASE WHEN `+leasedCount("w.id")+` < $1 THEN p.first ELSE p.later END)
		FROM (SELECT webhook_id, min(next_attempt_at) AS first, min(next_attempt_at) FILTER (WHERE next_attempt_at > now()) AS later
			FROM webhook_deliveries WHERE status = 'pending' GROUP BY webhook_id) p
		JOIN webhooks w ON w.id = p.webhook_id WHERE w.enabled`, perHook).Scan(&t)
	if err != nil {
		return time.Time{}, opError("next due delivery", err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// Depth counts the deliveries still pending (the outbox's depth).
func (s *SystemWebhookOutbox) Depth(ctx context.Context) (int, error) {
	var n int
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, opError("count pending deliveries", err)
	}
	return n, nil
}
