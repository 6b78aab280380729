-- Every table leads with the business id. Times are Unix microseconds.

CREATE TABLE businesses (
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE api_keys (
    business_id  TEXT NOT NULL REFERENCES businesses (id),
    id           TEXT NOT NULL,
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    hash         BLOB NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER,
    PRIMARY KEY (business_id, id)
) WITHOUT ROWID;

-- seq (the rowid) orders records oldest first: one connection writes, so it
-- grows in commit order.
CREATE TABLE records (
    business_id TEXT NOT NULL REFERENCES businesses (id),
    object      TEXT NOT NULL,
    id          TEXT NOT NULL,
    seq         INTEGER PRIMARY KEY,
    data        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX records_by_id ON records (business_id, object, id);
CREATE INDEX records_in_order ON records (business_id, object, seq);

-- record_pages counts the records of each object in each page of 1024 seq
-- values, so a list at a deep offset finds its page by summing a few counts
-- instead of stepping over every record before it. The triggers keep the
-- counts in the same transaction as the records, whoever writes them.
CREATE TABLE record_pages (
    business_id TEXT NOT NULL,
    object      TEXT NOT NULL,
    page        INTEGER NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (business_id, object, page)
) WITHOUT ROWID;

CREATE TRIGGER records_count_insert AFTER INSERT ON records BEGIN
    INSERT INTO record_pages (business_id, object, page, n)
    VALUES (NEW.business_id, NEW.object, NEW.seq >> 10, 1)
    ON CONFLICT (business_id, object, page) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER records_count_delete AFTER DELETE ON records BEGIN
    UPDATE record_pages SET n = n - 1
    WHERE business_id = OLD.business_id AND object = OLD.object AND page = OLD.seq >> 10;
    DELETE FROM record_pages
    WHERE business_id = OLD.business_id AND object = OLD.object AND page = OLD.seq >> 10 AND n <= 0;
END;
