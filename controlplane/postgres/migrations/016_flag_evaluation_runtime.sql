-- Where a flag is evaluated (PostHog's evaluation_runtime: 'all', 'client' or 'server') and
-- its evaluation tags (a subset of its tags, stored lower-cased): /decide and /flags leave a
-- flag out of a request from another runtime, and out of a request naming evaluation contexts
-- when the flag has evaluation tags and none of them is named (docs/flags.md, "Which flags a
-- request gets").
ALTER TABLE feature_flags
    ADD COLUMN evaluation_runtime text NOT NULL DEFAULT 'all'
        CHECK (evaluation_runtime IN ('all', 'client', 'server')),
    ADD COLUMN evaluation_tags text[] NOT NULL DEFAULT '{}';

-- How persons are bucketed (PostHog's flag-level bucketing_identifier): NULL or 'distinct_id'
-- hash the distinct id, 'device_id' the request's device id (docs/flags.md, "Who is bucketed").
ALTER TABLE feature_flags
    ADD COLUMN bucketing_identifier text CHECK (bucketing_identifier IN ('distinct_id', 'device_id'));
