-- Webhooks: a project's subscriptions to its changes, and the durable outbox of their
-- deliveries. A write that reports an event (a flag or annotation change, a scheduled change
-- run) inserts one delivery per enabled hook of the project subscribing to the event's kind in
-- its own transaction, so an event is delivered if and only if its write committed. Every
-- control-plane replica runs a dispatcher that claims due deliveries with FOR UPDATE SKIP
-- LOCKED and leases each by moving its next_attempt_at past the attempt's timeout, so each
-- attempt is made by one replica; a replica that dies mid-attempt leaves a lease that runs
-- out, and another replica retries.
CREATE TABLE webhooks (
    id         bigserial PRIMARY KEY,
    project_id bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url        text NOT NULL,
    events     text[] NOT NULL,
    secret     text NOT NULL,
    enabled    boolean NOT NULL DEFAULT true,
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_project ON webhooks (project_id);

CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY,
    event_id         uuid NOT NULL,                 -- the same for every hook of one event
    webhook_id       bigint NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    kind             text NOT NULL,
    event            jsonb NOT NULL,                -- what the body is made of (project, actor, version, object)
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_status_code integer,
    last_error       text NOT NULL DEFAULT '',
    response_prefix  text NOT NULL DEFAULT '',      -- at most the first 256 bytes of the last answer
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz
);
-- The dispatchers' queue: only pending deliveries, by when they are due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
-- A hook's delivery log, newest first.
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, created_at DESC);
