-- Release plans under the approvals gate, and plans on flags with property filters or
-- variants.
--
-- A policy's allow_approved_release_plans lets the advances of a release plan whose start
-- was approved (release_plans.approved_change_request_id) write without review. A plan whose
-- advance the gate stopped waits for that change request (waiting_change_request_id) and
-- advances in the transaction of the vote that applies it.
--
-- release_plan_tallies.undecided counts the exposures answering false that could not be
-- placed in the control arm: no reason from the SDK and no stored person to evaluate the
-- flag's conditions on.
ALTER TABLE approval_policies ADD COLUMN allow_approved_release_plans boolean NOT NULL DEFAULT false;

ALTER TABLE release_plans
    ADD COLUMN approved_change_request_id uuid REFERENCES change_requests (id) ON DELETE SET NULL,
    ADD COLUMN waiting_change_request_id  uuid REFERENCES change_requests (id) ON DELETE SET NULL;
CREATE INDEX release_plans_waiting ON release_plans (waiting_change_request_id) WHERE waiting_change_request_id IS NOT NULL;

ALTER TABLE release_plan_tallies ADD COLUMN undecided bigint NOT NULL DEFAULT 0;
