-- Edges and their credentials: every call an edge makes to the sync service carries its token,
-- stored here only as a SHA-256 hash. A revoked edge keeps its row (revoked_at), so that its
-- name stays in the record and is not reused by accident.
CREATE TABLE edges (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL CHECK (name <> '' AND length(name) <= 200),
    token_sha256 bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
-- One live edge per name; a revoked name may be issued again.
CREATE UNIQUE INDEX edges_live_name ON edges (name) WHERE revoked_at IS NULL;
