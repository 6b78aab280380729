package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crmd/crmd/objects"
)

// The webhook side of the store: see objects.WebhookStore.

// deliveriesChannel is the channel of the NOTIFY a write that adds
// deliveries sends when it commits.
const deliveriesChannel = "crmd_deliveries"

// eventSeq is the name of the sequence that numbers a business's events
// (migration 0004 says why a sequence). Business ids are lowercase letters
// and digits; quoting keeps the name whatever they are.
func eventSeq(businessID string) string {
	return pgx.Identifier{"event_seq_" + businessID}.Sanitize()
}

func (t *tx) NextEventSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := t.t.QueryRow(ctx, "SELECT nextval($1::regclass)", eventSeq(t.business)).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("numbering an event: %w", err)
	}
	return seq, nil
}

func (t *tx) InsertEvent(ctx context.Context, e *objects.Event) error {
	t.outbox.Queue("INSERT INTO events VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
		t.business, e.ID, e.Seq, e.Type, e.Object, e.RecordID, e.OccurredAt, e.Payload)
	return nil
}

func (t *tx) InsertDelivery(ctx context.Context, d *objects.Delivery) error {
	headers := d.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	var event *string
	payload := d.Payload
	if d.EventID != "" {
		event, payload = &d.EventID, nil
	}
	t.outbox.Queue(`INSERT INTO deliveries (id, business_id, message_id, endpoint, url, headers, event_id, payload,
		status, attempts, next_attempt_at, created_at, updated_at, held) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', 0, $9, $10, $10,
		coalesce((SELECT disabled_at IS NOT NULL FROM webhook_endpoints WHERE business_id = $2 AND name = $4), false))`,
		d.ID, t.business, d.MessageID, d.Endpoint, d.URL, headers, event, payload, d.NextAttemptAt, d.CreatedAt)
	t.deliveries = true
	return nil
}

func (t *tx) EnsureEndpoint(ctx context.Context, name, secret string, at time.Time) error {
	_, err := t.t.Exec(ctx, `INSERT INTO webhook_endpoints (business_id, name, secret, created_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, t.business, name, secret, at)
	return err
}

func (t *tx) EnsureInbound(ctx context.Context, name, tokenHash, tokenHint, secret string, at time.Time) (bool, error) {
	tag, err := t.t.Exec(ctx, `INSERT INTO inbound_webhooks (business_id, name, token_hash, token_hint, secret, created_at, rotated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (business_id, name) DO NOTHING`, t.business, name, tokenHash, tokenHint, secret, at)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

func (t *tx) ReserveInboundKey(ctx context.Context, inbound, key string, since, at time.Time) (*objects.InboundAnswer, error) {
	// The insert waits for a concurrent transaction that inserted the same
	// key; once it commits, the key is taken and its answer readable.
	tag, err := t.t.Exec(ctx, `INSERT INTO inbound_answers VALUES ($1, $2, $3, 0, '', $4)
		ON CONFLICT (business_id, inbound, key) DO UPDATE SET status = 0, body = '', created_at = excluded.created_at
		WHERE inbound_answers.created_at < $5`, t.business, inbound, key, at, since)
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	var a objects.InboundAnswer
	err = t.t.QueryRow(ctx, "SELECT status, body, created_at FROM inbound_answers WHERE business_id = $1 AND inbound = $2 AND key = $3",
		t.business, inbound, key).Scan(&a.Status, &a.Body, &a.At)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func (t *tx) SaveInboundAnswer(ctx context.Context, inbound, key string, a *objects.InboundAnswer) error {
	_, err := t.t.Exec(ctx, `UPDATE inbound_answers SET status = $1, body = $2, created_at = $3
		WHERE business_id = $4 AND inbound = $5 AND key = $6`, a.Status, a.Body, a.At, t.business, inbound, key)
	return err
}

func (t *tx) HolderOf(ctx context.Context, object, field, value string) (string, error) {
	var id string
	err := t.t.QueryRow(ctx, "SELECT record_id FROM unique_values WHERE business_id = $1 AND object = $2 AND field = $3 AND value = $4",
		t.business, object, field, value).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// DeliveryWakeups starts listening for the NOTIFY of writes that add
// deliveries, in this process and every other, on a connection of its own.
func (s *Store) DeliveryWakeups() <-chan struct{} {
	s.listen.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopListen = cancel
		s.listening.Add(1)
		go func() {
			defer s.listening.Done()
			s.listenLoop(ctx)
		}()
	})
	return s.wake
}

// deliveriesCommitted wakes this process's dispatcher and, through
// notifyLoop, every other process's.
func (s *Store) deliveriesCommitted() {
	s.signal()
	select {
	case s.notify <- struct{}{}:
	default: // one is queued already
	}
}

// notifyLoop sends a NOTIFY for each request, until ctx ends; requests
// made while one is sent are answered by one more. The NOTIFY is not sent
// in the writes' transactions: PostgreSQL serializes the commits of
// transactions that notify (a lock on the notification queue, held until
// the commit is flushed), which made a business's writes commit one at a
// time. A wake-up lost to a crash in between is made up for by every
// dispatcher's poll.
func (s *Store) notifyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.notify:
			if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, '')", deliveriesChannel); err != nil && ctx.Err() == nil {
				s.log.Warn("notifying of deliveries", "err", err)
			}
		}
	}
}

func (s *Store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// listenLoop LISTENs until ctx ends, reconnecting after errors. Every
// (re)connection wakes the dispatcher, since notifications sent while it was
// not listening are lost.
func (s *Store) listenLoop(ctx context.Context) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+deliveriesChannel); err != nil {
				conn.Conn().Close(context.Background())
				return err
			}
			s.signal()
			for {
				if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
					conn.Conn().Close(context.Background()) // leaves no LISTEN behind in the pool
					return err
				}
				s.signal()
			}
		}()
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("listening for deliveries", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// deliveryColumns are a delivery's columns, with its payload: its event's,
// when it has one.
const deliveryColumns = `deliveries.id, deliveries.business_id, deliveries.message_id, deliveries.endpoint, deliveries.url,
	deliveries.headers, coalesce(deliveries.event_id, ''), coalesce(deliveries.payload, (SELECT ev.payload FROM events ev
		WHERE ev.business_id = deliveries.business_id AND ev.id = deliveries.event_id)),
	deliveries.status, deliveries.attempts, deliveries.next_attempt_at, deliveries.last_status, deliveries.last_error,
	deliveries.last_response, deliveries.created_at, deliveries.updated_at`

func scanDelivery(row pgx.Row, extra ...any) (*objects.Delivery, error) {
	d := &objects.Delivery{}
	dest := append([]any{&d.ID, &d.BusinessID, &d.MessageID, &d.Endpoint, &d.URL, &d.Headers, &d.EventID, &d.Payload, &d.Status, &d.Attempts, &d.NextAttemptAt,
		&d.LastStatus, &d.LastError, &d.LastResponse, &d.CreatedAt, &d.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = d.NextAttemptAt.UTC(), d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return d, nil
}

// endpointEnabled checks, row by row, that a delivery d's endpoint is
// enabled: held deliveries aside, this only skips the few a write queued
// while its endpoint was being disabled. As a scalar subquery it keeps the
// planner walking deliveries_due in order and stopping at the limit; as
// EXISTS it became a join that read and sorted every due delivery.
const endpointEnabled = `coalesce((SELECT e.disabled_at IS NULL FROM webhook_endpoints e
	WHERE e.business_id = d.business_id AND e.name = d.endpoint), false)`

// ClaimDeliveries leases due deliveries with FOR UPDATE SKIP LOCKED, so
// that dispatchers in several processes claim different ones. The due rows
// are picked in a materialized CTE: as "WHERE id IN (SELECT ... LIMIT n)"
// the planner may run the subquery once per row of a nested loop and lease
// more than n (a known PostgreSQL trap, seen here as a dispatcher with more
// sends than workers).
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]*objects.Delivery, error) {
	var out []*objects.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		// The walk of deliveries_due in order, stopping at the limit, is
		// pinned: with statistics from before a backlog built up, the
		// planner reads every due delivery and sorts them, on each claim,
		// just when the dispatcher has most to catch up on.
		if _, err := t.Exec(ctx, "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off"); err != nil {
			return err
		}
		rows, err := t.Query(ctx, `WITH due AS MATERIALIZED (
				SELECT d.id FROM deliveries d
				WHERE d.status = 'pending' AND NOT d.held AND d.next_attempt_at <= $3
				AND `+endpointEnabled+`
				ORDER BY d.next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
			UPDATE deliveries SET lease_owner = $1, next_attempt_at = $2 FROM due
			WHERE deliveries.id = due.id AND deliveries.status = 'pending' AND deliveries.next_attempt_at <= $3
			RETURNING `+deliveryColumns+`,
				(SELECT secret FROM webhook_endpoints e WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint)`,
			owner, now.Add(lease), now, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			var secret string
			d, err := scanDelivery(rows, &secret)
			if err != nil {
				return err
			}
			d.Secret = secret
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claiming deliveries: %w", err)
	}
	return out, nil
}

func (s *Store) RecordAttempts(ctx context.Context, as []objects.Attempt) error {
	var b pgx.Batch
	for _, a := range as {
		queueAttempt(&b, a)
	}
	return pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		if err := t.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("recording attempts: %w", err)
		}
		return nil
	})
}

// queueAttempt queues the statements that record an attempt.
func queueAttempt(b *pgx.Batch, a objects.Attempt) {
	status := objects.DeliveryPending
	switch {
	case a.OK:
		status = objects.DeliverySucceeded
	case a.Next.IsZero():
		status = objects.DeliveryFailed
	}
	next := a.Next
	if next.IsZero() {
		next = a.At
	}
	b.Queue(`UPDATE deliveries SET status = $1, attempts = attempts + 1, next_attempt_at = $2,
		last_status = $3, last_error = $4, last_response = $5, updated_at = $6, lease_owner = '',
		held = coalesce((SELECT e.disabled_at IS NOT NULL FROM webhook_endpoints e
			WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint), false)
		WHERE id = $7 AND lease_owner = $8`,
		status, next, a.Status, a.Error, a.Response, a.At, a.DeliveryID, a.Owner)
	// The endpoint's state follows every attempt made, also one whose
	// lease was lost meanwhile: it did reach the endpoint, or fail to.
	if a.OK {
		b.Queue("UPDATE webhook_endpoints SET failing_since = NULL WHERE business_id = $1 AND name = $2 AND failing_since IS NOT NULL",
			a.BusinessID, a.Endpoint)
		return
	}
	reason := a.Disable
	if reason == "" {
		reason = fmt.Sprintf("every delivery failed for %s", a.FailingFor)
	}
	b.Queue(`UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, $1),
		disabled_at = CASE WHEN disabled_at IS NULL AND ($4 OR coalesce(failing_since, $1) <= $5) THEN $1 ELSE disabled_at END,
		disabled_reason = CASE WHEN disabled_at IS NULL AND ($4 OR coalesce(failing_since, $1) <= $5) THEN $6 ELSE disabled_reason END
		WHERE business_id = $2 AND name = $3`,
		a.At, a.BusinessID, a.Endpoint, a.Disable != "", a.At.Add(-a.FailingFor), reason)
	b.Queue(`UPDATE deliveries SET held = true WHERE business_id = $1 AND endpoint = $2 AND status = 'pending' AND NOT held
		AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.business_id = $1 AND e.name = $2 AND e.disabled_at IS NOT NULL)`,
		a.BusinessID, a.Endpoint)
}

// holdDeliveries takes a disabled endpoint's pending deliveries out of
// what the dispatchers look at. A write that queued one for the endpoint
// while it was being disabled may leave it unheld; the claim's own check of
// the endpoint skips it.
func holdDeliveries(ctx context.Context, t pgx.Tx, businessID, endpoint string) error {
	_, err := t.Exec(ctx, "UPDATE deliveries SET held = true WHERE business_id = $1 AND endpoint = $2 AND status = 'pending' AND NOT held",
		businessID, endpoint)
	return err
}

func (s *Store) NextDeliveryAt(ctx context.Context) (time.Time, bool, error) {
	var next time.Time
	err := s.pool.QueryRow(ctx, `SELECT d.next_attempt_at FROM deliveries d
		WHERE d.status = 'pending' AND NOT d.held
		AND `+endpointEnabled+`
		ORDER BY d.next_attempt_at LIMIT 1`).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return next.UTC(), true, nil
}

func (s *Store) Deliveries(ctx context.Context, businessID, status string, limit int) ([]*objects.Delivery, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+deliveryColumns+` FROM deliveries
		WHERE business_id = $1 AND ($2 = '' OR status = $2) ORDER BY created_at DESC, id DESC LIMIT $3`, businessID, status, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func (s *Store) ReplayDelivery(ctx context.Context, businessID, id string, now time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		tag, err := t.Exec(ctx, `UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = $1, lease_owner = '',
			updated_at = $1, held = coalesce((SELECT e.disabled_at IS NOT NULL FROM webhook_endpoints e
				WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint), false)
			WHERE business_id = $2 AND id = $3`, now, businessID, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("delivery %s: %w", id, objects.ErrNotFound)
		}
		_, err = t.Exec(ctx, "SELECT pg_notify($1, '')", deliveriesChannel)
		return err
	})
}

func (s *Store) Endpoints(ctx context.Context, businessID string) ([]*objects.Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, secret, disabled_at, disabled_reason, failing_since, created_at
		FROM webhook_endpoints WHERE business_id = $1 ORDER BY name`, businessID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.Endpoint
	for rows.Next() {
		e := &objects.Endpoint{BusinessID: businessID}
		var disabled, failing *time.Time
		if err := rows.Scan(&e.Name, &e.Secret, &disabled, &e.DisabledReason, &failing, &e.CreatedAt); err != nil {
			return nil, err
		}
		if disabled != nil {
			e.Disabled, e.DisabledAt = true, disabled.UTC()
		}
		if failing != nil {
			e.FailingSince = failing.UTC()
		}
		e.CreatedAt = e.CreatedAt.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) EnableEndpoint(ctx context.Context, businessID, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		tag, err := t.Exec(ctx, `UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = '', failing_since = NULL
			WHERE business_id = $1 AND name = $2`, businessID, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("webhook %s: %w", name, objects.ErrNotFound)
		}
		if _, err := t.Exec(ctx, "UPDATE deliveries SET held = false WHERE business_id = $1 AND endpoint = $2 AND status = 'pending' AND held",
			businessID, name); err != nil {
			return err
		}
		_, err = t.Exec(ctx, "SELECT pg_notify($1, '')", deliveriesChannel)
		return err
	})
}

func (s *Store) DisableEndpoint(ctx context.Context, businessID, name, reason string, at time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		// Locking the row first makes a second disable keep the first reason.
		var disabled bool
		err := t.QueryRow(ctx, "SELECT disabled_at IS NOT NULL FROM webhook_endpoints WHERE business_id = $1 AND name = $2 FOR UPDATE",
			businessID, name).Scan(&disabled)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("webhook %s: %w", name, objects.ErrNotFound)
		}
		if err != nil || disabled {
			return err
		}
		if _, err := t.Exec(ctx, "UPDATE webhook_endpoints SET disabled_at = $1, disabled_reason = $2 WHERE business_id = $3 AND name = $4",
			at, reason, businessID, name); err != nil {
			return err
		}
		return holdDeliveries(ctx, t, businessID, name)
	})
}

const inboundColumns = "business_id, name, token_hash, token_hint, secret, created_at, rotated_at"

func scanInbound(row pgx.Row) (*objects.Inbound, error) {
	in := &objects.Inbound{}
	if err := row.Scan(&in.BusinessID, &in.Name, &in.TokenHash, &in.TokenHint, &in.Secret, &in.CreatedAt, &in.RotatedAt); err != nil {
		return nil, err
	}
	in.CreatedAt, in.RotatedAt = in.CreatedAt.UTC(), in.RotatedAt.UTC()
	return in, nil
}

func (s *Store) InboundByTokenHash(ctx context.Context, hash string) (*objects.Inbound, error) {
	in, err := scanInbound(s.pool.QueryRow(ctx, "SELECT "+inboundColumns+" FROM inbound_webhooks WHERE token_hash = $1", hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, objects.ErrNotFound
	}
	return in, err
}

func (s *Store) Inbounds(ctx context.Context, businessID string) ([]*objects.Inbound, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+inboundColumns+" FROM inbound_webhooks WHERE business_id = $1 ORDER BY name", businessID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.Inbound
	for rows.Next() {
		in, err := scanInbound(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

func (s *Store) RotateInbound(ctx context.Context, businessID, name, tokenHash, tokenHint string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, "UPDATE inbound_webhooks SET token_hash = $1, token_hint = $2, rotated_at = $3 WHERE business_id = $4 AND name = $5",
		tokenHash, tokenHint, at, businessID, name)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("inbound webhook %s: %w", name, objects.ErrNotFound)
	}
	return nil
}

func (s *Store) PruneInboundAnswers(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM inbound_answers WHERE created_at < $1", before)
	return err
}
