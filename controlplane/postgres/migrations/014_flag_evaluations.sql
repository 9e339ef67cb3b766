-- How often edges evaluated each flag, so that flags nobody uses any more can be found. Edges
-- count evaluations per project, flag key and value and report them every few seconds; a
-- report adds to the current hour's bucket. Buckets older than 31 days are deleted; the last
-- evaluation of every flag is kept apart, for good.
CREATE TABLE flag_evaluations (
    project_id bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    flag_key   text NOT NULL,
    value      text NOT NULL,        -- "true", "false", a variant's key, or "other"
    hour       timestamptz NOT NULL, -- the start of the hour the counts were reported in
    count      bigint NOT NULL CHECK (count > 0),
    PRIMARY KEY (project_id, flag_key, hour, value)
);
CREATE INDEX flag_evaluations_hour ON flag_evaluations (hour);

CREATE TABLE flag_last_called (
    project_id     bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    flag_key       text NOT NULL,
    last_called_at timestamptz NOT NULL,
    PRIMARY KEY (project_id, flag_key)
);
