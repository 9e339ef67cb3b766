-- What a release plan's charts draw over time, and what lets ingestion skip projects that
-- have no active plan.
--
-- release_plan_points holds a guardrail's state at an evaluation of its plan: the step, each
-- arm's users and metric, the estimated change with its always-valid interval (null until
-- there is one) and whether it was a regression. The evaluator writes a point only when it
-- differs from the guardrail's last one, numbered from 0 by seq, and keeps at most
-- controlplane.MaxPlanPoints per guardrail: only the points whose seq is a multiple of a
-- stride that doubles as the plan goes on, and the latest (postgres.recordPlanPoints).
CREATE TABLE release_plan_points (
    plan_id           bigint NOT NULL REFERENCES release_plans (id) ON DELETE CASCADE,
    guardrail         integer NOT NULL,
    seq               bigint NOT NULL,
    at                timestamptz NOT NULL,
    step              integer NOT NULL,
    control_users     bigint NOT NULL,
    control_mean      double precision NOT NULL,
    treatment_users   bigint NOT NULL,
    treatment_mean    double precision NOT NULL,
    relative          boolean NOT NULL,
    estimate          double precision,
    lower_bound       double precision,
    upper_bound       double precision,
    regression        boolean NOT NULL,
    PRIMARY KEY (plan_id, guardrail, seq)
);

-- A project's id is sent on flagedge_release_plans when one of its plans starts, changes
-- state or is deleted, as the transaction commits: every replica's ingestion keeps the set of
-- projects with a running or paused plan (postgres.ActivePlans) and reads no plan for a
-- project outside it. A trigger rather than application code, so that no path that starts or
-- ends a plan can forget to say so.
CREATE FUNCTION release_plans_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('flagedge_release_plans', OLD.project_id::text);
    ELSE
        PERFORM pg_notify('flagedge_release_plans', NEW.project_id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER release_plans_started AFTER INSERT OR DELETE ON release_plans
    FOR EACH ROW EXECUTE FUNCTION release_plans_notify();
CREATE TRIGGER release_plans_state AFTER UPDATE OF state ON release_plans
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION release_plans_notify();
