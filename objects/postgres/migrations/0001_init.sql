-- Every table leads with the business id, so that a PostgreSQL sharded by
-- business (Citus) can distribute records as they are; businesses and
-- api_keys are small and would be reference tables.

CREATE TABLE businesses (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE api_keys (
    business_id  text COLLATE "C" NOT NULL REFERENCES businesses (id),
    id           text COLLATE "C" NOT NULL,
    name         text NOT NULL,
    prefix       text NOT NULL,
    hash         bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    PRIMARY KEY (business_id, id)
);

-- Records are listed in id order: ids begin with their creation time. data
-- is json, not jsonb: crmd never queries inside it, and json keeps the bytes
-- crmd wrote, which reads copy into answers without decoding them.
CREATE TABLE records (
    business_id text COLLATE "C" NOT NULL REFERENCES businesses (id),
    object      text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    data        json NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (business_id, object, id)
);
