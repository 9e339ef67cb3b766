-- Cohort sizes, and dashboards (the usage dashboards of flags).
ALTER TABLE cohorts ADD COLUMN count int;
ALTER TABLE cohorts ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

CREATE TABLE dashboards (
    id          bigserial PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES projects(id),
    name        text NOT NULL,
    created_by  bigint REFERENCES users(id),
    created_at  timestamptz NOT NULL DEFAULT now()
);
