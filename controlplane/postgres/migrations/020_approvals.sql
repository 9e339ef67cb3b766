-- Placeholder on branch guarded only: migration 020 belongs to branch approvals
-- (020_approvals.sql). Tern needs contiguous numbers, so this empty file lets 021 run here;
-- at merge, take approvals' file in its place.
SELECT 1;
