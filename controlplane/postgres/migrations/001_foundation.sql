-- Organisations, users, projects, keys, feature flags and the activity log.

CREATE TABLE organizations (
    id          bigserial PRIMARY KEY,
    uuid        uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id                 bigserial PRIMARY KEY,
    uuid               uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    distinct_id        text NOT NULL UNIQUE,
    first_name         text NOT NULL DEFAULT '',
    last_name          text NOT NULL DEFAULT '',
    email              text NOT NULL UNIQUE,
    is_email_verified  boolean NOT NULL DEFAULT false,
    organization_id    bigint NOT NULL REFERENCES organizations(id),
    org_role           text NOT NULL DEFAULT 'member' CHECK (org_role IN ('member', 'admin')),
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id                bigserial PRIMARY KEY,
    uuid              uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    organization_id   bigint NOT NULL REFERENCES organizations(id),
    name              text NOT NULL,
    api_token         text NOT NULL UNIQUE,
    secret_api_token  text NOT NULL UNIQUE,
    timezone          text NOT NULL DEFAULT 'UTC',
    -- snapshot_version counts changes to what edges serve for this project.
    snapshot_version  bigint NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX projects_organization_id ON projects (organization_id);

CREATE TABLE group_type_mappings (
    project_id        bigint NOT NULL REFERENCES projects(id),
    group_type        text NOT NULL,
    group_type_index  int NOT NULL CHECK (group_type_index BETWEEN 0 AND 4),
    PRIMARY KEY (project_id, group_type_index),
    UNIQUE (project_id, group_type)
);

CREATE TABLE personal_api_keys (
    id           bigserial PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users(id),
    label        text NOT NULL DEFAULT '',
    -- secure_value is the SHA-256 of the key; the key itself is never stored.
    secure_value bytea NOT NULL UNIQUE,
    scopes       text[] NOT NULL,
    -- scoped_projects limits the key to these projects; NULL means every project.
    scoped_projects bigint[],
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);
CREATE INDEX personal_api_keys_user_id ON personal_api_keys (user_id);

CREATE TABLE feature_flags (
    id                            bigserial PRIMARY KEY,
    project_id                    bigint NOT NULL REFERENCES projects(id),
    key                           text NOT NULL,
    name                          text NOT NULL DEFAULT '',
    filters                       jsonb NOT NULL,
    deleted                       boolean NOT NULL DEFAULT false,
    active                        boolean NOT NULL DEFAULT true,
    created_by                    bigint REFERENCES users(id),
    created_at                    timestamptz NOT NULL DEFAULT now(),
    updated_at                    timestamptz NOT NULL DEFAULT now(),
    version                       int NOT NULL DEFAULT 1,
    last_modified_by              bigint REFERENCES users(id),
    ensure_experience_continuity  boolean NOT NULL DEFAULT false,
    rollback_conditions           jsonb,
    performed_rollback            boolean NOT NULL DEFAULT false,
    tags                          text[] NOT NULL DEFAULT '{}',
    usage_dashboard               bigint,
    analytics_dashboards          bigint[] NOT NULL DEFAULT '{}',
    has_enriched_analytics        boolean NOT NULL DEFAULT false
);
-- A key is unique among the project's non-deleted flags.
CREATE UNIQUE INDEX feature_flags_project_key ON feature_flags (project_id, key) WHERE NOT deleted;
CREATE INDEX feature_flags_project_id ON feature_flags (project_id, id DESC);

CREATE TABLE activity_log (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  bigint NOT NULL REFERENCES projects(id),
    user_id     bigint REFERENCES users(id),
    activity    text NOT NULL,
    scope       text NOT NULL,
    item_id     text NOT NULL,
    detail      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX activity_log_scope ON activity_log (project_id, scope, item_id, created_at DESC);
