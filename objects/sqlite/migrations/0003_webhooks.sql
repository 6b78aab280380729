-- Webhooks: endpoints (a name's signing secret and state), the outbox of
-- events and their deliveries, inbound webhooks (a name's URL token) and
-- the answers inbound webhooks gave to requests with idempotency keys.
-- Secrets and tokens are kept as they are: crmd signs with the secrets and
-- shows both to operators; API keys, which nobody needs to see again, are
-- the ones kept as hashes.
CREATE TABLE webhook_endpoints (
    business_id     TEXT NOT NULL REFERENCES businesses (id),
    name            TEXT NOT NULL,
    secret          TEXT NOT NULL,
    disabled_at     INTEGER,
    disabled_reason TEXT NOT NULL DEFAULT '',
    failing_since   INTEGER,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (business_id, name)
) WITHOUT ROWID;

CREATE TABLE event_seqs (
    business_id TEXT NOT NULL PRIMARY KEY REFERENCES businesses (id),
    seq         INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE events (
    business_id TEXT NOT NULL,
    id          TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    object      TEXT NOT NULL,
    record_id   TEXT NOT NULL,
    occurred_at INTEGER NOT NULL,
    payload     BLOB NOT NULL,
    PRIMARY KEY (business_id, id)
) WITHOUT ROWID;

CREATE TABLE deliveries (
    id              TEXT NOT NULL PRIMARY KEY,
    business_id     TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    endpoint        TEXT NOT NULL,
    url             TEXT NOT NULL,
    headers         TEXT NOT NULL, -- JSON object
    payload         BLOB NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    lease_owner     TEXT NOT NULL DEFAULT '',
    lease_until     INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    last_response   BLOB NOT NULL DEFAULT x'',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) WITHOUT ROWID;

-- The dispatcher's question: what is due.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_business ON deliveries (business_id, created_at);

CREATE TABLE inbound_webhooks (
    business_id TEXT NOT NULL REFERENCES businesses (id),
    name        TEXT NOT NULL,
    token       TEXT NOT NULL UNIQUE,
    secret      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    rotated_at  INTEGER NOT NULL,
    PRIMARY KEY (business_id, name)
) WITHOUT ROWID;

CREATE TABLE inbound_answers (
    business_id TEXT NOT NULL,
    inbound     TEXT NOT NULL,
    key         TEXT NOT NULL,
    status      INTEGER NOT NULL,
    body        BLOB NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (business_id, inbound, key)
) WITHOUT ROWID;
CREATE INDEX inbound_answers_age ON inbound_answers (created_at);
