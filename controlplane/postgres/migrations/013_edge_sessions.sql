-- Which snapshot versions the connected edges serve, so that the API can say when a change has
-- reached every edge, whichever control-plane replica each edge is connected to.
--
-- A session is one edge's Watch stream, recorded by the replica that serves it. The replica
-- refreshes seen_at of its sessions every few seconds and deletes a session when its stream
-- ends; a replica that died leaves sessions that stop being refreshed, and readers count a
-- session as connected only while seen_at is recent (stale ones are deleted by any replica).
CREATE TABLE edge_sessions (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    edge_name    text NOT NULL,           -- the name of the edge's token (authenticated)
    edge_id      text NOT NULL,           -- what the edge calls itself (--edge-id)
    replica_id   uuid NOT NULL,           -- the serving replica's process
    replica      text NOT NULL,           -- its name, for people
    connected_at timestamptz NOT NULL DEFAULT now(),
    seen_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX edge_sessions_replica ON edge_sessions (replica_id);

-- What each session acknowledged it serves, per project.
CREATE TABLE edge_session_versions (
    session_id uuid NOT NULL REFERENCES edge_sessions (id) ON DELETE CASCADE,
    project_id bigint NOT NULL,
    version    bigint NOT NULL,
    acked_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, project_id)
);
