-- Approvals (PostHog's products/approvals): a project's policies, each gating one action on
-- its flags, and the change requests the gate files instead of writing a gated change, with
-- their votes. A change request is applied in the transaction of the vote that reaches its
-- quorum; snapshot_version is then the project's version that holds the change, and live_at
-- when every connected edge was first seen serving it.
CREATE TABLE approval_policies (
    id                           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id                   bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    action_key                   text NOT NULL,
    conditions                   jsonb NOT NULL DEFAULT '{}',
    approver_config              jsonb NOT NULL,
    allow_self_approve           boolean NOT NULL DEFAULT false,
    bypass_org_membership_levels integer[] NOT NULL DEFAULT '{}',
    bypass_roles                 uuid[] NOT NULL DEFAULT '{}',
    expires_after                interval NOT NULL DEFAULT '14 days',
    enabled                      boolean NOT NULL DEFAULT true,
    created_by                   bigint REFERENCES users (id),
    created_at                   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at                   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT approval_policies_project_action UNIQUE (project_id, action_key)
);

CREATE TABLE change_requests (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id        bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    action_key        text NOT NULL,
    action_version    integer NOT NULL DEFAULT 1,
    resource_type     text NOT NULL,
    resource_id       text, -- NULL for a flag to create
    intent            jsonb NOT NULL,
    intent_display    jsonb NOT NULL,
    policy_snapshot   jsonb NOT NULL,
    validation_status text NOT NULL DEFAULT 'valid' CHECK (validation_status IN ('valid', 'invalid', 'expired', 'stale')),
    validation_errors jsonb,
    validated_at      timestamptz,
    state             text NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'approved', 'applied', 'rejected', 'expired', 'failed')),
    created_by        bigint REFERENCES users (id),
    applied_by        bigint REFERENCES users (id),
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at        timestamptz NOT NULL,
    applied_at        timestamptz,
    apply_error       text,
    result_data       jsonb,
    snapshot_version  bigint,
    live_at           timestamptz
);
CREATE INDEX change_requests_project ON change_requests (project_id, created_at DESC);
CREATE INDEX change_requests_open ON change_requests (project_id, resource_type, resource_id) WHERE state IN ('pending', 'approved');
CREATE INDEX change_requests_expiring ON change_requests (expires_at) WHERE state = 'pending';
CREATE INDEX change_requests_unconfirmed ON change_requests (project_id) WHERE state = 'applied' AND live_at IS NULL;

CREATE TABLE approvals (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    change_request_id uuid NOT NULL REFERENCES change_requests (id) ON DELETE CASCADE,
    created_by        bigint NOT NULL REFERENCES users (id),
    decision          text NOT NULL CHECK (decision IN ('approved', 'rejected')),
    reason            text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT approvals_one_vote UNIQUE (change_request_id, created_by)
);

-- A scheduled change whose write the gate stopped waits for its change request: it is not
-- due while it names one, and the request's outcome settles it.
ALTER TABLE scheduled_changes ADD COLUMN change_request_id uuid REFERENCES change_requests (id) ON DELETE SET NULL;
CREATE INDEX scheduled_changes_change_request ON scheduled_changes (change_request_id) WHERE change_request_id IS NOT NULL;
