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
-- payload.
ALTER TABLE deliveries ADD COLUMN held boolean NOT NULL DEFAULT false;
ALTER TABLE deliveries ADD COLUMN event_id text COLLATE "C";
ALTER TABLE deliveries ALTER COLUMN payload DROP NOT NULL;
UPDATE deliveries SET next_attempt_at = greatest(next_attempt_at, lease_until) WHERE status = 'pending';
UPDATE deliveries d SET held = true FROM webhook_endpoints e
    WHERE d.status = 'pending' AND e.business_id = d.business_id AND e.name = d.endpoint AND e.disabled_at IS NOT NULL;
ALTER TABLE deliveries DROP COLUMN lease_until;
DROP INDEX deliveries_due;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending' AND NOT held;
-- Enabling a webhook releases what it held.
CREATE INDEX deliveries_held ON deliveries (business_id, endpoint) WHERE status = 'pending' AND held;

-- Event numbers come from a sequence per business rather than a counter
-- row: the row's lock, held from the event to the commit, made a business's
-- writes with events wait for each other's commits, one at a time. A
-- sequence never waits; a rolled-back write leaves its number unused. For
-- one record, a later write still has a larger number: it takes its number
-- after the record's lock, so after the earlier write committed.
DO $$
DECLARE b record;
BEGIN
    FOR b IN SELECT businesses.id, coalesce(event_seqs.seq, 0) AS seq
             FROM businesses LEFT JOIN event_seqs ON event_seqs.business_id = businesses.id LOOP
        EXECUTE format('CREATE SEQUENCE %I START %s', 'event_seq_' || b.id, b.seq + 1);
    END LOOP;
END $$;
DROP TABLE event_seqs;
