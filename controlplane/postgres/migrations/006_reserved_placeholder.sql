-- Placeholder: migration 006 belongs to another branch. This file only keeps the sequence
-- contiguous on the console branch, so that 008 can be applied; delete it when merging.
SELECT 1;
