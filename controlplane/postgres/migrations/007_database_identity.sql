-- The database's identity: created once, with the schema, and never changed. Edges keep it
-- beside their copy of the snapshots; snapshot versions are comparable only within one
-- database, so an edge whose copy came from another database (re-created, or a second
-- `make run`) is sent everything afresh instead of trusting its versions.
CREATE TABLE database_identity (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- one row only
    singleton  boolean NOT NULL DEFAULT true UNIQUE CHECK (singleton)
);
INSERT INTO database_identity DEFAULT VALUES;

