-- Membership notifications: every distinct id and group a transaction stores is announced on
-- the flagedge_membership channel when it commits, so that the edges' membership filters
-- (which say "nothing is stored about this key" without a look-up) never lack a stored key.
-- Triggers rather than application code: no path that stores a distinct id or a group can
-- forget to announce it.
--
-- Payloads: "<project id> p <JSON array of distinct ids>", "<project id> g <JSON array of
-- [group type index, group key]>", or "<project id> rebuild" when the keys do not fit in one
-- notification: the listener then reads that project's keys from the tables. Keys are sent in
-- chunks of 6,000 bytes plus at most one key, below NOTIFY's limit of 8,000; ids as capture
-- and /decide cut them (200 characters) always fit, so only a key over about 1,800 bytes
-- written by some other path can lead to a rebuild.

CREATE FUNCTION membership_announce(project bigint, kind text, keys text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF octet_length(keys) < 7800 THEN
        PERFORM pg_notify('flagedge_membership', project::text || ' ' || kind || ' ' || keys);
    ELSE
        PERFORM pg_notify('flagedge_membership', project::text || ' rebuild');
    END IF;
END $$;

CREATE FUNCTION membership_notify_distinct_ids() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM membership_announce(project_id, 'p', '[' || string_agg(k, ',') || ']')
    FROM (SELECT project_id, k,
                 sum(octet_length(k) + 1) OVER (PARTITION BY project_id ORDER BY k ROWS UNBOUNDED PRECEDING) / 6000 AS chunk
          FROM (SELECT project_id, to_json(distinct_id)::text AS k FROM inserted) AS keyed) AS chunked
    GROUP BY project_id, chunk;
    RETURN NULL;
END $$;

CREATE TRIGGER person_distinct_ids_membership AFTER INSERT ON person_distinct_ids
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION membership_notify_distinct_ids();

CREATE FUNCTION membership_notify_groups() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM membership_announce(project_id, 'g', '[' || string_agg(k, ',') || ']')
    FROM (SELECT project_id, k,
                 sum(octet_length(k) + 1) OVER (PARTITION BY project_id ORDER BY k ROWS UNBOUNDED PRECEDING) / 6000 AS chunk
          FROM (SELECT project_id, json_build_array(group_type_index, group_key)::text AS k FROM inserted) AS keyed) AS chunked
    GROUP BY project_id, chunk;
    RETURN NULL;
END $$;

CREATE TRIGGER groups_membership AFTER INSERT ON groups
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION membership_notify_groups();
