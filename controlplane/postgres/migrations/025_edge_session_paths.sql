-- Each edge session carries its path from the root of its tree, written when it opens.
--
-- A session behind relays hangs off its relay's session (replica_id), and counts while the
-- root of its tree (a session of a replica) is marked. The rollout waiter and the edges list
-- walked every session up to its root on each read: 90-150 ms with 10,000 edges behind four
-- relays on an idle database, several times that while a change was being acknowledged; and a
-- relay's report walked up from each session it named to check that it is behind the relay
-- (75 ms a report under load). The sessions on the way from the root to the session
-- (path_ids, both ends included: the root first) and their edge names (path_names) are now
-- stored.
ALTER TABLE edge_sessions
    ADD COLUMN path_ids   uuid[],
    ADD COLUMN path_names text[];

WITH RECURSIVE tree(id, path_ids, path_names, depth) AS (
    SELECT s.id, ARRAY[s.id], ARRAY[s.edge_name], 0 FROM edge_sessions s
        WHERE NOT EXISTS (SELECT FROM edge_sessions up WHERE up.id = s.replica_id)
    UNION ALL SELECT s.id, t.path_ids || s.id, t.path_names || s.edge_name, t.depth + 1
        FROM edge_sessions s JOIN tree t ON s.replica_id = t.id WHERE t.depth < 16)
UPDATE edge_sessions s SET path_ids = t.path_ids, path_names = t.path_names FROM tree t WHERE s.id = t.id;

-- Sessions on no path to a root (a cycle): they never counted.
DELETE FROM edge_sessions WHERE path_ids IS NULL;

ALTER TABLE edge_sessions
    ALTER COLUMN path_ids SET NOT NULL,
    ALTER COLUMN path_names SET NOT NULL;
