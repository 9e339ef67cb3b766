-- Webhook fairness: a hook has at most a few deliveries under lease (being attempted) at once
-- across every replica (--webhook-per-hook-concurrency), so that a slow or dead receiver holds
-- only its own hook's share of the dispatchers' slots and the other hooks' deliveries are made
-- on time. A lease was only a next_attempt_at moved past the attempt's timeout, which a
-- retry's delay looks like too; leased_until tells the two apart, so a claim can count a
-- hook's deliveries under lease. It is set by the claim and cleared when the attempt's outcome
-- is recorded; a lease whose replica died runs out and no longer counts.
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;
-- A hook's deliveries under lease (few: at most the cap per hook, and the leases of replicas
-- that died, until another takes them).
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id) WHERE leased_until IS NOT NULL;
-- A hook's pending deliveries by when they are due: a claim takes the first few of each hook.
CREATE INDEX webhook_deliveries_hook_due ON webhook_deliveries (webhook_id, next_attempt_at) WHERE status = 'pending';
