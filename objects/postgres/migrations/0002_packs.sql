-- Rule packs: every revision of every pack, which revision of each pack is
-- active, and a generation per business that moves on with every activation,
-- which servers poll to pick up new revisions.
CREATE TABLE pack_revisions (
    business_id text COLLATE "C" NOT NULL REFERENCES businesses (id),
    pack        text COLLATE "C" NOT NULL,
    revision    integer NOT NULL,
    files       json NOT NULL,
    hash        text NOT NULL,
    created_at  timestamptz NOT NULL,
    created_by  text NOT NULL,
    PRIMARY KEY (business_id, pack, revision)
);

CREATE TABLE pack_active (
    business_id  text COLLATE "C" NOT NULL,
    pack         text COLLATE "C" NOT NULL,
    revision     integer NOT NULL,
    activated_at timestamptz NOT NULL,
    activated_by text NOT NULL,
    PRIMARY KEY (business_id, pack),
    FOREIGN KEY (business_id, pack, revision) REFERENCES pack_revisions (business_id, pack, revision)
);

CREATE TABLE pack_state (
    business_id text COLLATE "C" NOT NULL PRIMARY KEY REFERENCES businesses (id),
    generation  bigint NOT NULL
);

-- The values of unique fields, one row a value, so that the primary key
-- refuses a second record with the same value.
CREATE TABLE unique_values (
    business_id text COLLATE "C" NOT NULL,
    object      text COLLATE "C" NOT NULL,
    field       text COLLATE "C" NOT NULL,
    value       text COLLATE "C" NOT NULL,
    record_id   text COLLATE "C" NOT NULL,
    PRIMARY KEY (business_id, object, field, value)
);
