-- Events that PostgreSQL refused for their content (a NUL in text or jsonb, invalid UTF-8, a
-- number or timestamp out of range, an id too long for an index). Ingestion stores the rest
-- of their batch and keeps each refused event here, as it arrived, with the reason, so that
-- nothing is lost silently and an operator can inspect, fix and replay it.
CREATE TABLE dead_letters (
    id           bigserial PRIMARY KEY,
    -- project_id is the project the event was sent to; 0 when the batch naming it could not
    -- be decoded. No foreign key: an event for a project that no longer exists lands here.
    project_id   bigint NOT NULL,
    -- event_uuid is the event's uuid as text, made printable; for finding an event, not a key.
    event_uuid   text NOT NULL,
    -- sqlstate is PostgreSQL's error code ("22P05"), or "undecodable" when the event could
    -- not be decoded from the sync protocol at all.
    sqlstate     text NOT NULL,
    reason       text NOT NULL,
    -- raw is the event as the edge encoded it (raw_format "sync.CapturedEvent", the sync
    -- protocol's protobuf message), or a JSON object whose text fields are base64 (raw_format
    -- "json") when the event did not come over the wire. bytea holds any byte.
    raw          bytea NOT NULL,
    raw_format   text NOT NULL,
    -- raw_digest is SHA-256 over the project id and raw: a redelivered batch dead-letters
    -- each of its events once, as it stores each good event once.
    raw_digest   bytea NOT NULL UNIQUE,
    edge_id      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letters_project_created ON dead_letters (project_id, created_at DESC);
