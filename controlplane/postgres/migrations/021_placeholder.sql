-- Placeholder: this number belongs to a migration of a branch merged in parallel (the
-- forwarding branch was given 022). When that branch is merged, its file replaces this one.
SELECT 1;
