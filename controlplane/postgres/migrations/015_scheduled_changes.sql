-- Changes to flags to be made at a set time (PostHog's scheduled changes). A pending change
-- has executed_at NULL; it is due at next_attempt_at once a transient failure has put it off,
-- at scheduled_at otherwise. The scheduler of every replica claims due changes with
-- SELECT … FOR UPDATE SKIP LOCKED and sets executed_at in the transaction that applies the
-- change, so each runs once.
CREATE TABLE scheduled_changes (
    id              bigserial PRIMARY KEY,
    project_id      bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    record_id       text NOT NULL,
    model_name      text NOT NULL,
    payload         jsonb NOT NULL,
    scheduled_at    timestamptz NOT NULL,
    executed_at     timestamptz,
    failure_reason  text,
    failure_count   integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    created_by      bigint REFERENCES users (id),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX scheduled_changes_due ON scheduled_changes ((COALESCE(next_attempt_at, scheduled_at))) WHERE executed_at IS NULL;
CREATE INDEX scheduled_changes_record ON scheduled_changes (project_id, model_name, record_id);
