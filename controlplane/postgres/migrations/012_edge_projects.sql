-- Edges scoped to projects: an edge with project_ids receives only those projects' snapshots
-- and membership filters, and may look up and ingest only for them. NULL keeps the meaning
-- edges had before: every project. The ids are not foreign keys: a deleted project simply
-- stops being served, and the edge's row keeps the record of what it was issued for.
ALTER TABLE edges ADD COLUMN project_ids bigint[] CHECK (cardinality(project_ids) > 0);
