-- Rule packs: every revision of every pack, which revision of each pack is
-- active, and a generation per business that moves on with every activation,
-- which servers poll to pick up new revisions.
CREATE TABLE pack_revisions (
    business_id TEXT NOT NULL REFERENCES businesses (id),
    pack        TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    files       TEXT NOT NULL, -- JSON: [{"name": ..., "content": ...}]
    hash        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (business_id, pack, revision)
) WITHOUT ROWID;

CREATE TABLE pack_active (
    business_id  TEXT NOT NULL,
    pack         TEXT NOT NULL,
    revision     INTEGER NOT NULL,
    activated_at INTEGER NOT NULL,
    activated_by TEXT NOT NULL,
    PRIMARY KEY (business_id, pack),
    FOREIGN KEY (business_id, pack, revision) REFERENCES pack_revisions (business_id, pack, revision)
) WITHOUT ROWID;

CREATE TABLE pack_state (
    business_id TEXT NOT NULL PRIMARY KEY REFERENCES businesses (id),
    generation  INTEGER NOT NULL
) WITHOUT ROWID;

-- The values of unique fields, one row a value, so that the primary key
-- refuses a second record with the same value.
CREATE TABLE unique_values (
    business_id TEXT NOT NULL,
    object      TEXT NOT NULL,
    field       TEXT NOT NULL,
    value       TEXT NOT NULL,
    record_id   TEXT NOT NULL,
    PRIMARY KEY (business_id, object, field, value)
) WITHOUT ROWID;
