-- Persons, their distinct ids, groups, cohorts and experience-continuity overrides: what flag
-- evaluation reads about users. Ingestion (capture) writes persons and groups.

CREATE TABLE persons (
    id            bigserial PRIMARY KEY,
    uuid          uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    project_id    bigint NOT NULL REFERENCES projects(id),
    properties    jsonb NOT NULL DEFAULT '{}',
    is_identified boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX persons_project_id ON persons (project_id, id);

CREATE TABLE person_distinct_ids (
    project_id   bigint NOT NULL REFERENCES projects(id),
    distinct_id  text NOT NULL,
    person_id    bigint NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
    PRIMARY KEY (project_id, distinct_id)
);
CREATE INDEX person_distinct_ids_person_id ON person_distinct_ids (person_id);

CREATE TABLE groups (
    project_id        bigint NOT NULL REFERENCES projects(id),
    group_type_index  int NOT NULL CHECK (group_type_index BETWEEN 0 AND 4),
    group_key         text NOT NULL,
    properties        jsonb NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, group_type_index, group_key)
);

CREATE TABLE cohorts (
    id           bigserial PRIMARY KEY,
    project_id   bigint NOT NULL REFERENCES projects(id),
    name         text NOT NULL DEFAULT '',
    description  text NOT NULL DEFAULT '',
    -- filters is {"properties": <property group>} for a property cohort.
    filters      jsonb NOT NULL DEFAULT '{"properties": {"type": "AND", "values": []}}',
    is_static    boolean NOT NULL DEFAULT false,
    deleted      boolean NOT NULL DEFAULT false,
    created_by   bigint REFERENCES users(id),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cohorts_project_id ON cohorts (project_id);

CREATE TABLE cohort_people (
    cohort_id  bigint NOT NULL REFERENCES cohorts(id) ON DELETE CASCADE,
    person_id  bigint NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
    PRIMARY KEY (cohort_id, person_id)
);
CREATE INDEX cohort_people_person_id ON cohort_people (person_id);

-- hash_key_overrides keeps a person's bucketing identifier per flag with experience
-- continuity: the first one written wins.
CREATE TABLE hash_key_overrides (
    project_id        bigint NOT NULL REFERENCES projects(id),
    person_id         bigint NOT NULL REFERENCES persons(id) ON DELETE CASCADE,
    feature_flag_key  text NOT NULL,
    hash_key          text NOT NULL,
    PRIMARY KEY (project_id, person_id, feature_flag_key)
);
