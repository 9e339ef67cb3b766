-- Release plans (guarded rollouts). A flag has at most one active (running or paused) plan.
-- Ingestion counts for the active plans of a project: release_plan_units holds each exposed
-- user's arm and the step of their first exposure (at most controlplane.MaxPlanUnits rows
-- per plan, counted in release_plans.units), release_plan_values each guardrail's events and
-- property total per exposed user. The evaluator of every replica claims running plans with
-- FOR UPDATE SKIP LOCKED, so one replica acts on a plan at a time.
CREATE TABLE release_plans (
    id                     bigserial PRIMARY KEY,
    project_id             bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    flag_id                bigint NOT NULL REFERENCES feature_flags (id) ON DELETE CASCADE,
    flag_key               text NOT NULL,
    steps                  jsonb NOT NULL,
    guardrails             jsonb NOT NULL,
    alpha                  double precision NOT NULL,
    on_regression          text NOT NULL,
    min_exposures_per_arm  bigint NOT NULL,
    state                  text NOT NULL,
    step                   integer NOT NULL DEFAULT 0,
    step_started_at        timestamptz NOT NULL,
    before_rollouts        jsonb NOT NULL,
    ended_snapshot_version bigint NOT NULL DEFAULT 0,
    created_by             bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX release_plans_one_active ON release_plans (flag_id) WHERE state IN ('running', 'paused');
CREATE INDEX release_plans_project_active ON release_plans (project_id) WHERE state IN ('running', 'paused');
CREATE INDEX release_plans_flag ON release_plans (flag_id, id DESC);

-- How many users a plan counts, apart from the plan's row so that ingestion never waits on
-- the evaluator's lock of the plan.
CREATE TABLE release_plan_tallies (
    plan_id bigint PRIMARY KEY REFERENCES release_plans (id) ON DELETE CASCADE,
    units   bigint NOT NULL DEFAULT 0
);

CREATE TABLE release_plan_units (
    plan_id     bigint NOT NULL REFERENCES release_plans (id) ON DELETE CASCADE,
    distinct_id text NOT NULL,
    treatment   boolean NOT NULL,
    step        integer NOT NULL,
    exposed_at  timestamptz NOT NULL,
    PRIMARY KEY (plan_id, distinct_id)
);

CREATE TABLE release_plan_values (
    plan_id     bigint NOT NULL REFERENCES release_plans (id) ON DELETE CASCADE,
    guardrail   integer NOT NULL,
    distinct_id text NOT NULL,
    events      bigint NOT NULL,
    total       double precision NOT NULL,
    PRIMARY KEY (plan_id, guardrail, distinct_id)
);

CREATE TABLE release_plan_decisions (
    id      bigserial PRIMARY KEY,
    plan_id bigint NOT NULL REFERENCES release_plans (id) ON DELETE CASCADE,
    at      timestamptz NOT NULL,
    kind    text NOT NULL,
    step    integer NOT NULL,
    reason  text NOT NULL
);
CREATE INDEX release_plan_decisions_plan ON release_plan_decisions (plan_id, id);
