-- Captured events: unique per project by uuid, so that redelivery stores an event once.
CREATE TABLE events (
    project_id   bigint NOT NULL REFERENCES projects(id),
    uuid         uuid NOT NULL,
    event        text NOT NULL,
    distinct_id  text NOT NULL,
    properties   jsonb NOT NULL,
    timestamp    timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (project_id, uuid)
);
CREATE INDEX events_project_timestamp ON events (project_id, timestamp DESC);
CREATE INDEX events_project_distinct_id ON events (project_id, distinct_id, timestamp DESC);
CREATE INDEX events_project_event ON events (project_id, event, timestamp DESC);
