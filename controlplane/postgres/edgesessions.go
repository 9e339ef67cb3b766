package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// EdgeAckChannel is notified whenever an edge acknowledges versions, so that whoever waits for
// a rollout on any replica looks again.
const EdgeAckChannel = "flagedge_edge_ack"

// SessionTTL is how long a session counts as connected after its replica last marked it. A
// replica marks its sessions every SessionTTL/5: a replica that died stops, and its edges'
// sessions stop counting within SessionTTL (sooner when the edges reconnect elsewhere and
// name the session they replace).
const SessionTTL = 15 * time.Second

// EdgeSessionStore records the edges' Watch streams and the versions they acknowledge.
type EdgeSessionStore struct {
	db *DB
}

var _ controlplane.EdgeSessionStore = (*EdgeSessionStore)(nil)

// NewEdgeSessionStore returns an EdgeSessionStore on db.
func NewEdgeSessionStore(db *DB) *EdgeSessionStore { return &EdgeSessionStore{db: db} }

// OpenSessions records new streams in one transaction (a fleet reconnecting opens thousands
// within seconds), after forgetting the sessions they replace.
func (s *EdgeSessionStore) OpenSessions(ctx context.Context, opens []controlplane.SessionOpening) error {
	var ids, names, edgeIDs, replicaIDs, replicas, replaced, replacedNames []string
	for _, o := range opens {
		ids, names, edgeIDs = append(ids, o.ID), append(names, o.EdgeName), append(edgeIDs, o.EdgeID)
		replicaIDs, replicas = append(replicaIDs, o.ReplicaID), append(replicas, o.Replica)
		if o.Replaces != "" {
			replaced, replacedNames = append(replaced, o.Replaces), append(replacedNames, o.EdgeName)
		}
	}
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		if len(replaced) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM edge_sessions s USING unnest($1::text[], $2::text[]) AS t(id, name)
				WHERE s.id::text = t.id AND s.edge_name = t.name`, replaced, replacedNames); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO edge_sessions (id, edge_name, edge_id, replica_id, replica)
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[], $5::text[])`, ids, names, edgeIDs, replicaIDs, replicas)
		return err
	})
	if err != nil {
		return opError("open edge sessions", err)
	}
	return nil
}

// CloseSessions forgets sessions.
func (s *EdgeSessionStore) CloseSessions(ctx context.Context, ids []string) error {
	if _, err := s.db.Pool.Exec(ctx, `DELETE FROM edge_sessions WHERE id = ANY($1::uuid[])`, ids); err != nil {
		return opError("close edge sessions", err)
	}
	return nil
}

// Heartbeat marks the replica's sessions and deletes those nobody marked within SessionTTL.
func (s *EdgeSessionStore) Heartbeat(ctx context.Context, replicaID string) error {
	_, err := s.db.Pool.Exec(ctx, `WITH marked AS (UPDATE edge_sessions SET seen_at = now() WHERE replica_id = $1)
		DELETE FROM edge_sessions WHERE seen_at < now() - $2::interval AND replica_id <> $1`, replicaID, SessionTTL)
	if err != nil {
		return opError("edge session heartbeat", err)
	}
	return nil
}

// Acknowledge records what the sessions' edges serve, all in one transaction (thousands of
// edges acknowledge each change within a second), and wakes the waiters of every replica
// once.
func (s *EdgeSessionStore) Acknowledge(ctx context.Context, acks []controlplane.Acknowledgement) ([]error, error) {
	ids, names := make([]string, len(acks)), make([]string, len(acks))
	for i, a := range acks {
		ids[i], names[i] = a.SessionID, a.EdgeName
	}
	results := make([]error, len(acks))
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		// The sessions that are the edges' and open, locked until the commit: one that ends
		// meanwhile is deleted after, with what is written here.
		rows, err := tx.Query(ctx, `UPDATE edge_sessions s SET seen_at = now()
			FROM unnest($1::uuid[], $2::text[]) AS t(id, name) WHERE s.id = t.id AND s.edge_name = t.name
			RETURNING s.id::text, s.edge_name`, ids, names)
		if err != nil {
			return err
		}
		type session struct{ id, edge string }
		open, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (session, error) {
			var s session
			return s, row.Scan(&s.id, &s.edge)
		})
		if err != nil {
			return err
		}
		found := make(map[session]bool, len(open))
		for _, s := range open {
			found[s] = true
		}
		// A session may acknowledge twice in one batch: the later says what it serves.
		type key struct {
			session string
			project int64
		}
		final := map[key]int64{} // version; -1: removed
		for i, a := range acks {
			if !found[session{a.SessionID, a.EdgeName}] {
				results[i] = controlplane.ErrNotFound
				continue
			}
			for p, v := range a.Versions {
				final[key{a.SessionID, p}] = v
			}
			for _, p := range a.Removed {
				final[key{a.SessionID, p}] = -1
			}
		}
		var sessions, gone []string
		var projects, held, removed []int64
		for k, v := range final {
			if v < 0 {
				gone, removed = append(gone, k.session), append(removed, k.project)
			} else {
				sessions, projects, held = append(sessions, k.session), append(projects, k.project), append(held, v)
			}
		}
		if len(sessions) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO edge_session_versions (session_id, project_id, version)
				SELECT s, p, v FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) AS t(s, p, v)
				ON CONFLICT (session_id, project_id) DO UPDATE SET version = EXCLUDED.version, acked_at = now()`,
				sessions, projects, held); err != nil {
				return err
			}
		}
		if len(gone) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM edge_session_versions v USING unnest($1::uuid[], $2::bigint[]) AS t(s, p)
				WHERE v.session_id = t.s AND v.project_id = t.p`, gone, removed); err != nil {
				return err
			}
		}
		if len(open) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, EdgeAckChannel)
		return err
	})
	if err != nil {
		return nil, opError("acknowledge versions", err)
	}
	return results, nil
}

// projectEdgesFrom joins project $1 with the sessions of the edges serving it that were seen
// within $2 (none: one row with NULL session columns) and what each serves of it.
const projectEdgesFrom = `FROM projects p
		LEFT JOIN (edge_sessions s JOIN edges e ON e.name = s.edge_name AND e.revoked_at IS NULL)
			ON s.seen_at >= now() - $2::interval AND (e.project_ids IS NULL OR p.id = ANY (e.project_ids))
		LEFT JOIN edge_session_versions v ON v.session_id = s.id AND v.project_id = p.id
		WHERE p.id = $1`

// CountLaggards counts in the database what Laggards would list: a waiter asks after every
// acknowledgement, and with thousands of edges reading them all each time cost the replica
// more than the acknowledgements.
func (s *EdgeSessionStore) CountLaggards(ctx context.Context, projectID, version int64) (int, error) {
	var projects, laggards int
	err := s.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT p.id),
			count(s.id) FILTER (WHERE COALESCE(v.version, 0) < $3)
		`+projectEdgesFrom, projectID, SessionTTL, version).Scan(&projects, &laggards)
	if err != nil {
		return 0, opError("count laggards", err)
	}
	if projects == 0 {
		return 0, controlplane.ErrNotFound
	}
	return laggards, nil
}

// FindProjectEdges lists the sessions marked within SessionTTL of the live edges that serve
// the project (all projects, or those their token lists), with what they serve of it, by
// edge name.
func (s *EdgeSessionStore) FindProjectEdges(ctx context.Context, projectID int64) (*controlplane.ProjectEdges, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT p.snapshot_version, s.edge_name, s.edge_id, s.replica, s.connected_at,
			COALESCE(v.version, 0), v.acked_at
		`+projectEdgesFrom+`
		ORDER BY s.edge_name, s.edge_id, s.connected_at`, projectID, SessionTTL)
	if err != nil {
		return nil, opError("find project edges", err)
	}
	defer rows.Close()
	var out *controlplane.ProjectEdges
	for rows.Next() {
		var current, version int64
		var name, edgeID, replica *string
		var connectedAt, ackedAt *time.Time
		if err := rows.Scan(&current, &name, &edgeID, &replica, &connectedAt, &version, &ackedAt); err != nil {
			return nil, opError("find project edges", err)
		}
		if out == nil {
			out = &controlplane.ProjectEdges{Current: current, Edges: []controlplane.EdgeProjectStatus{}}
		}
		if name == nil { // no connected edge
			continue
		}
		out.Edges = append(out.Edges, controlplane.EdgeProjectStatus{Name: *name, EdgeID: *edgeID, Replica: *replica,
			ConnectedAt: *connectedAt, Version: version, AckedAt: ackedAt, Lag: max(current-version, 0)})
	}
	if err := rows.Err(); err != nil {
		return nil, opError("find project edges", err)
	}
	if out == nil {
		return nil, controlplane.ErrNotFound
	}
	return out, nil
}
