-- Events forwarded to PostHog: a project's destinations (a PostHog capture host and project
-- key), the durable queue of the events each has yet to receive, and the events a destination
-- refused for good. The ingest transaction that stores an event (controlplane/postgres
-- ingest.go) also queues it for every enabled destination of its project, so an event is
-- queued exactly when its batch is acknowledged, whichever transport brought it. Every
-- control-plane replica runs a dispatcher (controlplane/forward) that leases one destination
-- at a time (leased_until, lease), sends its oldest queued events as one batch, and deletes
-- them once the destination answered.

-- store_events off: the project's events are queued for its destinations only, not stored
-- (persons and groups are still updated: flags read them).
ALTER TABLE projects ADD COLUMN store_events boolean NOT NULL DEFAULT true;

CREATE TABLE event_destinations (
    id              bigserial PRIMARY KEY,
    project_id      bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url             text NOT NULL,
    api_key         text NOT NULL,
    enabled         boolean NOT NULL DEFAULT true,
    -- Why sending stopped for good until the destination is changed (its key refused: 401,
    -- 403); '' while sending. Events are still queued.
    paused_reason   text NOT NULL DEFAULT '',
    attempts        integer NOT NULL DEFAULT 0,          -- failed attempts since the last success
    last_error      text NOT NULL DEFAULT '',
    next_attempt_at timestamptz NOT NULL DEFAULT now(),  -- a retry's delay (backoff, Retry-After)
    leased_until    timestamptz,                         -- a dispatcher is sending a batch
    lease           uuid,                                -- which claim holds the lease
    sent_events     bigint NOT NULL DEFAULT 0,
    last_sent_at    timestamptz,
    created_by      bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_destinations_project ON event_destinations (project_id);

CREATE TABLE event_forward_queue (
    destination_id bigint NOT NULL REFERENCES event_destinations (id) ON DELETE CASCADE,
    seq            bigserial,                       -- the order events are sent in
    uuid           uuid NOT NULL,
    event          text NOT NULL,
    distinct_id    text NOT NULL,
    properties     jsonb NOT NULL,
    timestamp      timestamptz NOT NULL,
    queued_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (destination_id, seq)
);
-- An event redelivered by an edge while still queued is queued once (what dedups it when the
-- project does not store events).
CREATE UNIQUE INDEX event_forward_queue_uuid ON event_forward_queue (destination_id, uuid);

CREATE TABLE event_forward_dead_letters (
    id             bigserial PRIMARY KEY,
    destination_id bigint NOT NULL REFERENCES event_destinations (id) ON DELETE CASCADE,
    uuid           uuid NOT NULL,
    event          jsonb NOT NULL,                  -- the event as it was sent
    status_code    integer NOT NULL,
    error          text NOT NULL,                   -- the start of the destination's answer
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_forward_dead_letters_destination ON event_forward_dead_letters (destination_id, id DESC);
