package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
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
			if err := forgetReplaced(ctx, tx, replaced, replacedNames); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO edge_sessions (id, edge_name, edge_id, replica_id, replica, path_ids, path_names)
			SELECT id, name, edge_id, replica_id, replica, ARRAY[id], ARRAY[name]
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[], $5::text[]) AS t(id, name, edge_id, replica_id, replica)`,
			ids, names, edgeIDs, replicaIDs, replicas)
		return err
	})
	if err != nil {
		return opError("open edge sessions", err)
	}
	return nil
}

// A session behind a relay (RelayReport) is stored with the session it hangs off as its
// replica_id, where a direct session has its replica's process: the sessions form trees
// rooted at the replicas' sessions, and a session ends with the one it hangs off. Each
// session also holds the sessions on the way from its tree's root to it, both included
// (path_ids: the root first; a root's is its own id alone), and their edge names
// (path_names), written when it opens or moves: the reads that follow a rollout need them
// for every session, and each relay's report asks whether the sessions it names are behind
// it; walking the trees for them cost 90-150 ms a read with 10,000 edges behind four relays,
// and 75 ms a report under load.

// maxTiers bounds how deep the trees of sessions are followed: relays behind relays.
const maxTiers = 16

// subtreeOf is the sessions of the uuid[] $1 and every session behind them, maxTiers (16)
// deep.
const subtreeOf = `WITH RECURSIVE tree(id, depth) AS (
		SELECT id, 0 FROM edge_sessions WHERE id = ANY($1::uuid[])
		UNION ALL SELECT s.id, t.depth + 1 FROM edge_sessions s JOIN tree t ON s.replica_id = t.id WHERE t.depth < 16)`

// forgetReplaced deletes the sessions an edge's new streams replace (those of the same edge
// name only), with the sessions behind them.
func forgetReplaced(ctx context.Context, tx pgx.Tx, ids, names []string) error {
	_, err := tx.Exec(ctx, `WITH RECURSIVE tree(id, depth) AS (
			SELECT s.id, 0 FROM edge_sessions s JOIN unnest($1::text[], $2::text[]) AS t(id, name) ON s.id::text = t.id AND s.edge_name = t.name
			UNION ALL SELECT s.id, t.depth + 1 FROM edge_sessions s JOIN tree t ON s.replica_id = t.id WHERE t.depth < $3)
		DELETE FROM edge_sessions WHERE id IN (SELECT id FROM tree)`, ids, names, maxTiers)
	return err
}

// CloseSessions forgets sessions, and the sessions behind them.
func (s *EdgeSessionStore) CloseSessions(ctx context.Context, ids []string) error {
	if _, err := s.db.Pool.Exec(ctx, subtreeOf+` DELETE FROM edge_sessions WHERE id IN (SELECT id FROM tree)`, ids); err != nil {
		return opError("close edge sessions", err)
	}
	return nil
}

// Heartbeat marks the replica's own sessions, and deletes the trees of those nobody marked
// within SessionTTL. A session behind a relay lives and dies with the root of its tree
// (projectEdgesWith reads the root's mark), so only the roots are written: rewriting the
// 10,000 rows of edges behind four relays every SessionTTL/5 was PostgreSQL's largest cost,
// and each rewrite queued behind the acknowledgements' locks on the same rows.
func (s *EdgeSessionStore) Heartbeat(ctx context.Context, replicaID string) error {
	_, err := s.db.Pool.Exec(ctx, `WITH marked AS (UPDATE edge_sessions SET seen_at = now() WHERE replica_id = $1)
		DELETE FROM edge_sessions WHERE path_ids[1] IN (SELECT id FROM edge_sessions
			WHERE cardinality(path_ids) = 1 AND seen_at < now() - $2::interval AND replica_id <> $1)`, replicaID, SessionTTL)
	if err != nil {
		return opError("edge session heartbeat", err)
	}
	return nil
}

// relayReportLockClass is the first key of the advisory lock that serialises a relay's
// reports (the second is its session id's hash).
const relayReportLockClass = 7300001

// ReportRelayed records a relay's report in one transaction: the sessions behind it that
// ended, those that opened (each after forgetting the one it replaces), and what they
// acknowledged. A session may be reported only behind the relay's own.
func (s *EdgeSessionStore) ReportRelayed(ctx context.Context, r controlplane.RelayReport) ([]string, error) {
	var unknown []string
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		unknown = nil
		// The relay's session by its key: compared as text, every report read all the
		// sessions (10,000 behind four relays: 10 ms a report while a change was acknowledged).
		if u, err := uuid.Parse(r.Session); err != nil || u.String() != r.Session {
			return controlplane.ErrNotFound
		}
		// One report of a relay at a time (relayReportLockClass), and its session kept from
		// being deleted until the commit (a key-share lock): a row lock that excluded writers
		// waited for every heartbeat, which rewrites each session's row (1.3 s with 10,000
		// edges behind four relays), so that acknowledgements stalled behind it.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, relayReportLockClass, r.Session); err != nil {
			return err
		}
		var open bool
		err := tx.QueryRow(ctx, `SELECT true FROM edge_sessions WHERE id = $1::uuid AND edge_name = $2 FOR KEY SHARE`,
			r.Session, r.Relay).Scan(&open)
		if errors.Is(err, pgx.ErrNoRows) {
			return controlplane.ErrNotFound
		}
		if err != nil {
			return err
		}
		named := reportNames(r)
		behind, err := sessionsBehind(ctx, tx, r.Session, named)
		if err != nil {
			return err
		}
		if closing := slices.DeleteFunc(slices.Clone(r.Closed), func(id string) bool { _, ok := behind[id]; return !ok }); len(closing) > 0 {
			if _, err := tx.Exec(ctx, subtreeOf+` DELETE FROM edge_sessions WHERE id IN (SELECT id FROM tree)`, closing); err != nil {
				return err
			}
			if behind, err = sessionsBehind(ctx, tx, r.Session, named); err != nil {
				return err
			}
		}
		rejected, err := openRelayed(ctx, tx, r, behind)
		if err != nil {
			return err
		}
		unknown = rejected
		var acks []controlplane.Acknowledgement
		for _, a := range r.Acks {
			name, ok := behind[a.SessionID]
			if !ok {
				unknown = append(unknown, a.SessionID)
				continue
			}
			a.EdgeName = name
			acks = append(acks, a)
		}
		if len(acks) == 0 {
			return nil
		}
		_, err = acknowledge(ctx, tx, acks, true)
		return err
	})
	if err != nil {
		return nil, opError("report relayed sessions", err)
	}
	return unknown, nil
}

// openRelayed records a report's opened sessions behind the relay (behind: its sessions by
// id, updated with those recorded) and returns those it refuses: a parent not behind the
// relay, or an id taken by a session elsewhere. It writes them in runs, each with one
// statement to forget what they replace and one to insert them: one statement per session
// made a relay's report of 2,500 new edges take 400 ms. A run ends before a session whose
// parent, id or replaced session is in it, so that every session is written as if one at a
// time, in order.
func openRelayed(ctx context.Context, tx pgx.Tx, r controlplane.RelayReport, behind map[string]string) ([]string, error) {
	var unknown []string
	for rest := r.Opened; len(rest) > 0; {
		var run []controlplane.RelayedOpening
		var parents, replaced, replacedNames, mine []string
		inRun := map[string]bool{}
		for len(rest) > 0 {
			o := rest[0]
			parent := o.Parent
			if parent == "" {
				parent = r.Session
			}
			if inRun[parent] || inRun[o.ID] || inRun[o.Replaces] {
				break
			}
			rest = rest[1:]
			if _, ok := behind[parent]; !ok && parent != r.Session {
				unknown = append(unknown, o.ID)
				continue
			}
			run, parents, inRun[o.ID] = append(run, o), append(parents, parent), true
			if o.Replaces != "" && o.Replaces != o.ID {
				replaced, replacedNames = append(replaced, o.Replaces), append(replacedNames, o.EdgeName)
			}
			// A session already behind the relay, reported again, hangs off its new parent; an
			// id taken by a session elsewhere is not the relay's to move.
			if _, ok := behind[o.ID]; ok {
				mine = append(mine, o.ID)
			}
		}
		if len(run) == 0 {
			continue
		}
		if len(replaced) > 0 {
			if err := forgetReplaced(ctx, tx, replaced, replacedNames); err != nil {
				return nil, err
			}
		}
		ids, names, edgeIDs := make([]string, len(run)), make([]string, len(run)), make([]string, len(run))
		for i, o := range run {
			ids[i], names[i], edgeIDs[i] = o.ID, o.EdgeName, o.EdgeID
		}
		rows, err := tx.Query(ctx, `INSERT INTO edge_sessions (id, edge_name, edge_id, replica_id, replica, path_ids, path_names)
			SELECT t.id, t.name, t.edge_id, t.parent, $5, p.path_ids || t.id, p.path_names || t.name
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[]) AS t(id, name, edge_id, parent)
			JOIN edge_sessions p ON p.id = t.parent AND NOT t.id = ANY (p.path_ids) -- not behind itself
			ON CONFLICT (id) DO UPDATE SET replica_id = EXCLUDED.replica_id, replica = EXCLUDED.replica, seen_at = now(),
				path_ids = EXCLUDED.path_ids, path_names = EXCLUDED.path_names
				WHERE EXCLUDED.id = ANY($6::uuid[]) AND edge_sessions.edge_name = EXCLUDED.edge_name
			RETURNING id::text`, ids, names, edgeIDs, parents, r.Replica, mine)
		if err != nil {
			return nil, err
		}
		written, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		done := make(map[string]bool, len(written))
		for _, id := range written {
			done[id] = true
		}
		if moved := slices.DeleteFunc(mine, func(id string) bool { return !done[id] }); len(moved) > 0 {
			if err := repath(ctx, tx, moved); err != nil {
				return nil, err
			}
		}
		for _, o := range run {
			if !done[o.ID] {
				unknown = append(unknown, o.ID)
				continue
			}
			behind[o.ID] = o.EdgeName
		}
	}
	return unknown, nil
}

// repath rewrites the paths of the sessions behind those that moved (ids), which hang off
// them as before, under their new paths.
func repath(ctx context.Context, tx pgx.Tx, ids []string) error {
	_, err := tx.Exec(ctx, `WITH RECURSIVE sub(id, path_ids, path_names, depth) AS (
			SELECT id, path_ids, path_names, 0 FROM edge_sessions WHERE id = ANY($1::uuid[])
			UNION ALL SELECT s.id, t.path_ids || s.id, t.path_names || s.edge_name, t.depth + 1
			FROM edge_sessions s JOIN sub t ON s.replica_id = t.id WHERE t.depth < $2)
		UPDATE edge_sessions s SET path_ids = sub.path_ids, path_names = sub.path_names
		FROM sub WHERE s.id = sub.id AND sub.depth > 0`,
		ids, maxTiers)
	return err
}

// sessionsBehind returns those of ids (not UUIDs: none) behind session, by id, with their
// edge names: those with session on their path. They are locked until tx ends, as
// acknowledge locks the sessions it writes for (a report's acknowledgements are of them),
// so that one deleted meanwhile takes what is written for it along.
func sessionsBehind(ctx context.Context, tx pgx.Tx, session string, ids []string) (map[string]string, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if u, err := uuid.Parse(id); err == nil && u.String() == id {
			valid = append(valid, id)
		}
	}
	out := map[string]string{}
	if len(valid) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT id::text, edge_name FROM edge_sessions
		WHERE id = ANY($2::uuid[]) AND id <> $1::uuid AND $1::uuid = ANY (path_ids) FOR KEY SHARE`, session, valid)
	if err != nil {
		return nil, err
	}
	var id, name string
	_, err = pgx.ForEachRow(rows, []any{&id, &name}, func() error {
		out[id] = name
		return nil
	})
	return out, err
}

// reportNames is every session a report names that must be behind the relay.
func reportNames(r controlplane.RelayReport) []string {
	names := slices.Clone(r.Closed)
	for _, o := range r.Opened {
		names = append(names, o.ID, o.Parent)
	}
	for _, a := range r.Acks {
		names = append(names, a.SessionID)
	}
	return names
}

// Acknowledge records what the sessions' edges serve, all in one transaction (thousands of
// edges acknowledge each change within a second), and wakes the waiters of every replica
// once.
func (s *EdgeSessionStore) Acknowledge(ctx context.Context, acks []controlplane.Acknowledgement) ([]error, error) {
	var results []error
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		results, err = acknowledge(ctx, tx, acks, false)
		return err
	})
	if err != nil {
		return nil, opError("acknowledge versions", err)
	}
	return results, nil
}

// acknowledge writes acknowledgements in tx, and notifies the waiters when any session was
// open; it returns one result per acknowledgement. locked says that tx already holds every
// acknowledging session open (a relay's report found them behind it): they are not read
// again.
func acknowledge(ctx context.Context, tx pgx.Tx, acks []controlplane.Acknowledgement, locked bool) ([]error, error) {
	ids, names := make([]string, len(acks)), make([]string, len(acks))
	for i, a := range acks {
		ids[i], names[i] = a.SessionID, a.EdgeName
	}
	results := make([]error, len(acks))
	err := func() error {
		// The sessions that are the edges' and open, locked until the commit: one that ends
		// meanwhile is deleted after, with what is written here. A key-share lock writes
		// nothing (the heartbeat marks the sessions seen) and waits for no heartbeat: with
		// 10,000 edges, updating every acknowledging session's row wrote 10,000 rows a change,
		// each after the heartbeat's lock of it.
		type session struct{ id, edge string }
		var open []session
		if locked {
			for _, a := range acks {
				open = append(open, session{a.SessionID, a.EdgeName})
			}
		} else {
			rows, err := tx.Query(ctx, `SELECT s.id::text, s.edge_name FROM edge_sessions s
				JOIN unnest($1::uuid[], $2::text[]) AS t(id, name) ON s.id = t.id AND s.edge_name = t.name
				FOR KEY SHARE OF s`, ids, names)
			if err != nil {
				return err
			}
			if open, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (session, error) {
				var s session
				return s, row.Scan(&s.id, &s.edge)
			}); err != nil {
				return err
			}
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
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, EdgeAckChannel)
		return err
	}()
	return results, err
}

// projectEdgesFrom joins project $1 with the live sessions (their root marked within $2) of
// the edges serving it (none: one row with NULL session columns) and what each serves of it.
// A session behind relays serves the project only when every edge on its path is live and
// served it.
const projectEdgesFrom = `FROM projects p
		LEFT JOIN (edge_sessions s JOIN edge_sessions root ON root.id = s.path_ids[1] AND root.seen_at >= now() - $2::interval)
			ON NOT EXISTS (SELECT FROM unnest(s.path_names) AS n(name) WHERE n.name NOT IN (SELECT name FROM serving))
		LEFT JOIN edge_session_versions v ON v.session_id = s.id AND v.project_id = p.id
		WHERE p.id = $1`

// projectEdgesWith is the names of the live edges that serve project $1, for projectEdgesFrom.
const projectEdgesWith = `WITH serving AS (SELECT name FROM edges WHERE revoked_at IS NULL AND (project_ids IS NULL OR $1 = ANY (project_ids)))
		`

// CountLaggards counts in the database what Laggards would list: a waiter asks after every
// acknowledgement, and with thousands of edges reading them all each time cost the replica
// more than the acknowledgements.
func (s *EdgeSessionStore) CountLaggards(ctx context.Context, projectID, version int64) (int, error) {
	var projects, laggards int
	err := s.db.Pool.QueryRow(ctx, projectEdgesWith+`SELECT count(DISTINCT p.id),
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

// AcknowledgedBelow reads the project's acknowledgements alone, stopping at the first below
// version: with 10,000 edges behind relays a count took 50-100 ms of the database, and ten
// times that while the machine was busy sending the change; a rollout waiter counting after
// every report kept one of its cores busy.
func (s *EdgeSessionStore) AcknowledgedBelow(ctx context.Context, projectID, version int64) (bool, error) {
	var below bool
	err := s.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM edge_session_versions WHERE project_id = $1 AND version < $2)`,
		projectID, version).Scan(&below)
	if err != nil {
		return false, opError("read acknowledgements", err)
	}
	return below, nil
}

// FindProjectEdges lists the live sessions (their tree's root marked within SessionTTL) of
// the live edges that serve the project (all projects, or those their token lists), with what they serve of it, by
// edge name.
func (s *EdgeSessionStore) FindProjectEdges(ctx context.Context, projectID int64) (*controlplane.ProjectEdges, error) {
	rows, err := s.db.Pool.Query(ctx, projectEdgesWith+`SELECT p.snapshot_version, s.edge_name, s.edge_id, s.replica, array_to_string(s.path_names, ' → '), s.connected_at,
			COALESCE(v.version, 0), v.acked_at
		`+projectEdgesFrom, projectID, SessionTTL)
	if err != nil {
		return nil, opError("find project edges", err)
	}
	defer rows.Close()
	var out *controlplane.ProjectEdges
	for rows.Next() {
		var current, version int64
		var name, edgeID, replica, path *string
		var connectedAt, ackedAt *time.Time
		if err := rows.Scan(&current, &name, &edgeID, &replica, &path, &connectedAt, &version, &ackedAt); err != nil {
			return nil, opError("find project edges", err)
		}
		if out == nil {
			out = &controlplane.ProjectEdges{Current: current, Edges: []controlplane.EdgeProjectStatus{}}
		}
		if name == nil { // no connected edge
			continue
		}
		out.Edges = append(out.Edges, controlplane.EdgeProjectStatus{Name: *name, EdgeID: *edgeID, Replica: *replica, Path: *path,
			ConnectedAt: *connectedAt, Version: version, AckedAt: ackedAt, Lag: max(current-version, 0)})
	}
	if err := rows.Err(); err != nil {
		return nil, opError("find project edges", err)
	}
	if out == nil {
		return nil, controlplane.ErrNotFound
	}
	// Sorted here: PostgreSQL sorting 10,000 rows by path took half the read.
	slices.SortFunc(out.Edges, func(a, b controlplane.EdgeProjectStatus) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.EdgeID, b.EdgeID), a.ConnectedAt.Compare(b.ConnectedAt))
	})
	return out, nil
}
