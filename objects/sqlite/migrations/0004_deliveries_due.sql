-- The outbox, made cheaper to write and to read.
--
-- What is due is one range of one index, whatever waits behind a disabled
-- webhook or is being sent: a disabled webhook's pending deliveries are
-- held out of the index, and a lease is the next attempt pushed to the
-- lease's end (lease_until is gone). Before, the dispatcher's two queries
-- walked every held and leased delivery, on every commit.
--
-- A delivery of an event points at it (event_id) rather than keeping a copy
-- of its payload; a webhook action's message, which has no event, keeps its
-- payload. Events and deliveries are tables with rowids: their rows are
-- large, which WITHOUT ROWID tables store badly.
CREATE TABLE events_new (
    business_id TEXT NOT NULL,
    id          TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    object      TEXT NOT NULL,
    record_id   TEXT NOT NULL,
    occurred_at INTEGER NOT NULL,
    payload     BLOB NOT NULL,
    PRIMARY KEY (business_id, id)
);
INSERT INTO events_new SELECT business_id, id, seq, type, object, record_id, occurred_at, payload FROM events;
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;

CREATE TABLE deliveries_new (
    id              TEXT NOT NULL PRIMARY KEY,
    business_id     TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    endpoint        TEXT NOT NULL,
    url             TEXT NOT NULL,
    headers         TEXT NOT NULL, -- JSON object
    event_id        TEXT,          -- the event whose payload is sent
    payload         BLOB,          -- or, without an event, the payload
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    held            INTEGER NOT NULL DEFAULT 0,
    lease_owner     TEXT NOT NULL DEFAULT '',
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    last_response   BLOB NOT NULL DEFAULT x'',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
INSERT INTO deliveries_new SELECT d.id, d.business_id, d.message_id, d.endpoint, d.url, d.headers, NULL, d.payload, d.status, d.attempts,
    CASE WHEN d.status = 'pending' THEN max(d.next_attempt_at, d.lease_until) ELSE d.next_attempt_at END,
    d.status = 'pending' AND EXISTS (SELECT 1 FROM webhook_endpoints e
        WHERE e.business_id = d.business_id AND e.name = d.endpoint AND e.disabled_at IS NOT NULL),
    d.lease_owner, d.last_status, d.last_error, d.last_response, d.created_at, d.updated_at
    FROM deliveries d;
DROP TABLE deliveries;
ALTER TABLE deliveries_new RENAME TO deliveries;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending' AND held = 0;
-- Enabling a webhook releases what it held.
CREATE INDEX deliveries_held ON deliveries (business_id, endpoint) WHERE status = 'pending' AND held = 1;
CREATE INDEX deliveries_business ON deliveries (business_id, created_at);
