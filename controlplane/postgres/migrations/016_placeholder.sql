-- Placeholder: migration 016 belongs to another branch (issue work in parallel). Whoever lands
-- the real 016 deletes this file in the same merge.
SELECT 1;
