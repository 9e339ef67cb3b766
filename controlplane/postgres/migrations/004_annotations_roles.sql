-- Annotations, organisation roles and their members, and flag role access.

CREATE TABLE annotations (
    id               bigserial PRIMARY KEY,
    project_id       bigint NOT NULL REFERENCES projects(id),
    organization_id  bigint NOT NULL REFERENCES organizations(id),
    content          text NOT NULL DEFAULT '',
    date_marker      timestamptz,
    creation_type    text NOT NULL DEFAULT 'USR' CHECK (creation_type IN ('USR', 'GIT')),
    dashboard_item   bigint,
    dashboard_id     bigint,
    scope            text NOT NULL DEFAULT 'dashboard_item' CHECK (scope IN ('dashboard_item', 'dashboard', 'project', 'organization')),
    deleted          boolean NOT NULL DEFAULT false,
    created_by       bigint REFERENCES users(id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX annotations_project ON annotations (project_id, date_marker DESC);
CREATE INDEX annotations_organization ON annotations (organization_id, date_marker DESC) WHERE scope = 'organization';

CREATE TABLE roles (
    id                          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id             bigint NOT NULL REFERENCES organizations(id),
    name                        text NOT NULL,
    -- 21: members may view flags restricted to this role; 37: they may edit them.
    feature_flags_access_level  int NOT NULL DEFAULT 37 CHECK (feature_flags_access_level IN (21, 37)),
    created_by                  bigint REFERENCES users(id),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organization_id, name)
);

CREATE TABLE role_memberships (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    role_id    uuid NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
    user_id    bigint NOT NULL REFERENCES users(id),
    joined_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (role_id, user_id)
);
CREATE INDEX role_memberships_user ON role_memberships (user_id);

CREATE TABLE feature_flag_role_access (
    id               bigserial PRIMARY KEY,
    feature_flag_id  bigint NOT NULL REFERENCES feature_flags(id),
    role_id          uuid NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
    added_at         timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (feature_flag_id, role_id)
);
