-- Webhooks: endpoints (a name's signing secret and state), the outbox of
-- events and their deliveries, inbound webhooks (a name's URL token) and
-- the answers inbound webhooks gave to requests with idempotency keys.
-- Secrets and tokens are kept as they are: crmd signs with the secrets and
-- shows both to operators; API keys, which nobody needs to see again, are
-- the ones kept as hashes.
CREATE TABLE webhook_endpoints (
    business_id     text COLLATE "C" NOT NULL REFERENCES businesses (id),
    name            text COLLATE "C" NOT NULL,
    secret          text NOT NULL,
    disabled_at     timestamptz,
    disabled_reason text NOT NULL DEFAULT '',
    failing_since   timestamptz,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (business_id, name)
);

CREATE TABLE event_seqs (
    business_id text COLLATE "C" NOT NULL PRIMARY KEY REFERENCES businesses (id),
    seq         bigint NOT NULL
);

CREATE TABLE events (
    business_id text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    type        text NOT NULL,
    object      text NOT NULL,
    record_id   text NOT NULL,
    occurred_at timestamptz NOT NULL,
    payload     bytea NOT NULL,
    PRIMARY KEY (business_id, id)
);

CREATE TABLE deliveries (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,
    business_id     text COLLATE "C" NOT NULL,
    message_id      text NOT NULL,
    endpoint        text COLLATE "C" NOT NULL,
    url             text NOT NULL,
    headers         json NOT NULL,
    payload         bytea NOT NULL,
    status          text NOT NULL,
    attempts        integer NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    lease_owner     text NOT NULL DEFAULT '',
    lease_until     timestamptz NOT NULL DEFAULT '1970-01-01T00:00:00Z',
    last_status     integer NOT NULL DEFAULT 0,
    last_error      text NOT NULL DEFAULT '',
    last_response   bytea NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

-- The dispatcher's question: what is due.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_business ON deliveries (business_id, created_at);

CREATE TABLE inbound_webhooks (
    business_id text COLLATE "C" NOT NULL REFERENCES businesses (id),
    name        text COLLATE "C" NOT NULL,
    token       text COLLATE "C" NOT NULL UNIQUE,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL,
    rotated_at  timestamptz NOT NULL,
    PRIMARY KEY (business_id, name)
);

CREATE TABLE inbound_answers (
    business_id text COLLATE "C" NOT NULL,
    inbound     text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    status      integer NOT NULL,
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (business_id, inbound, key)
);
CREATE INDEX inbound_answers_age ON inbound_answers (created_at);
