-- Placeholder: migration 015 belongs to another branch (issue work in parallel). Whoever lands
-- the real 015 deletes this file in the same merge.
SELECT 1;
