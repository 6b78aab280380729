-- Inbound webhook tokens are kept as their SHA-256, as API keys are: a
-- token is a credential, and a hash is enough to find its webhook. Only a
-- hint (in_ and four characters) stays readable; the token is shown once,
-- when it is made. The URLs in use keep working.
ALTER TABLE inbound_webhooks RENAME COLUMN token TO token_hash;
ALTER TABLE inbound_webhooks ADD COLUMN token_hint TEXT NOT NULL DEFAULT '';
UPDATE inbound_webhooks SET token_hint = substr(token_hash, 1, 7), token_hash = crmd_sha256_hex(token_hash);
