-- What is due is one range of one index, whatever waits behind a disabled
-- webhook or is being sent: a disabled webhook's pending deliveries are
-- held out of the index, and a lease is the next attempt pushed to the
-- lease's end (lease_until is gone). Before, the dispatcher's two queries
-- walked every held and leased delivery, on every commit.
ALTER TABLE deliveries ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
UPDATE deliveries SET next_attempt_at = max(next_attempt_at, lease_until) WHERE status = 'pending';
UPDATE deliveries SET held = 1 WHERE status = 'pending' AND EXISTS (SELECT 1 FROM webhook_endpoints e
    WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint AND e.disabled_at IS NOT NULL);
ALTER TABLE deliveries DROP COLUMN lease_until;
DROP INDEX deliveries_due;
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending' AND held = 0;
-- Enabling a webhook releases what it held.
CREATE INDEX deliveries_held ON deliveries (business_id, endpoint) WHERE status = 'pending' AND held = 1;
