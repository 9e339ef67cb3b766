-- Per-project configuration of browser SDKs (PostHog's field names), sent to edges in the
-- snapshot, and early access features: a named feature in a release stage, tied to the flag
-- that enrols people in it.
ALTER TABLE projects
    ADD COLUMN autocapture_opt_out           boolean NOT NULL DEFAULT false,
    ADD COLUMN session_recording_opt_in      boolean NOT NULL DEFAULT false,
    ADD COLUMN heatmaps_opt_in               boolean NOT NULL DEFAULT false,
    ADD COLUMN capture_console_log_opt_in    boolean NOT NULL DEFAULT false,
    ADD COLUMN capture_performance_opt_in    boolean NOT NULL DEFAULT false,
    ADD COLUMN autocapture_exceptions_opt_in boolean NOT NULL DEFAULT false;

CREATE TABLE early_access_features (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id        bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    -- A flag with a feature cannot be hard-deleted from under it (flags are only soft-deleted).
    feature_flag_id   bigint REFERENCES feature_flags (id) ON DELETE RESTRICT,
    name              text NOT NULL CHECK (name <> '' AND length(name) <= 200),
    description       text NOT NULL DEFAULT '',
    stage             text NOT NULL CHECK (stage IN ('draft', 'concept', 'alpha', 'beta', 'general-availability', 'archived')),
    documentation_url text NOT NULL DEFAULT '' CHECK (length(documentation_url) <= 800),
    created_at        timestamptz NOT NULL DEFAULT now()
);
-- A flag belongs to at most one feature.
CREATE UNIQUE INDEX early_access_features_flag ON early_access_features (feature_flag_id);
CREATE INDEX early_access_features_project ON early_access_features (project_id, created_at);
