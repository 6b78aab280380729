package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/crmd/crmd/objects"
)

// The webhook side of the store: see objects.WebhookStore.

func (t *tx) NextEventSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := t.s.stmts.nextSeq.QueryRowContext(bg, t.business).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("numbering an event: %w", err)
	}
	return seq, nil
}

func (t *tx) InsertEvent(ctx context.Context, e *objects.Event) error {
	_, err := t.s.stmts.insertEvent.ExecContext(bg, t.business, e.ID, e.Seq, e.Type, e.Object, e.RecordID, micros(e.OccurredAt), e.Payload)
	if err != nil {
		return fmt.Errorf("storing an event: %w", err)
	}
	return nil
}

func (t *tx) InsertDelivery(ctx context.Context, d *objects.Delivery) error {
	headers, err := json.Marshal(d.Headers)
	if err != nil {
		return err
	}
	var event, payload any // NULL unless set
	if d.EventID != "" {
		event = d.EventID
	} else {
		payload = d.Payload
	}
	_, err = t.s.stmts.insertDelivery.ExecContext(bg, d.ID, t.business, d.MessageID, d.Endpoint, d.URL, string(headers), event, payload,
		micros(d.NextAttemptAt), micros(d.CreatedAt), micros(d.CreatedAt), t.business, d.Endpoint)
	if err != nil {
		return fmt.Errorf("storing a delivery: %w", err)
	}
	t.s.deliveriesAdded.Store(true)
	return nil
}

func (t *tx) EnsureEndpoint(ctx context.Context, name, secret string, at time.Time) error {
	_, err := t.s.conn.ExecContext(bg, `INSERT INTO webhook_endpoints (business_id, name, secret, created_at)
		VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, t.business, name, secret, micros(at))
	return err
}

func (t *tx) EnsureInbound(ctx context.Context, name, tokenHash, tokenHint, secret string, at time.Time) (bool, error) {
	res, err := t.s.conn.ExecContext(bg, `INSERT INTO inbound_webhooks (business_id, name, token_hash, token_hint, secret, created_at, rotated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (business_id, name) DO NOTHING`, t.business, name, tokenHash, tokenHint, secret, micros(at), micros(at))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (t *tx) ReserveInboundKey(ctx context.Context, inbound, key string, since, at time.Time) (*objects.InboundAnswer, error) {
	var a objects.InboundAnswer
	var created int64
	err := t.s.conn.QueryRowContext(bg, `SELECT status, body, created_at FROM inbound_answers
		WHERE business_id = ? AND inbound = ? AND key = ?`, t.business, inbound, key).Scan(&a.Status, &a.Body, &created)
	switch {
	case err == nil && created >= micros(since):
		a.At = fromMicros(created)
		return &a, nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return nil, err
	}
	// The writer is the only one: the key is this transaction's until it
	// commits.
	_, err = t.s.conn.ExecContext(bg, `INSERT INTO inbound_answers VALUES (?, ?, ?, 0, x'', ?)
		ON CONFLICT DO UPDATE SET status = 0, body = x'', created_at = excluded.created_at`, t.business, inbound, key, micros(at))
	return nil, err
}

func (t *tx) SaveInboundAnswer(ctx context.Context, inbound, key string, a *objects.InboundAnswer) error {
	_, err := t.s.conn.ExecContext(bg, `UPDATE inbound_answers SET status = ?, body = ?, created_at = ?
		WHERE business_id = ? AND inbound = ? AND key = ?`, a.Status, a.Body, micros(a.At), t.business, inbound, key)
	return err
}

func (t *tx) HolderOf(ctx context.Context, object, field, value string) (string, error) {
	var id string
	err := t.s.conn.QueryRowContext(bg, "SELECT record_id FROM unique_values WHERE business_id = ? AND object = ? AND field = ? AND value = ?",
		t.business, object, field, value).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// wakeDispatcher tells this process's dispatcher that deliveries wait.
func (s *Store) wakeDispatcher() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Store) DeliveryWakeups() <-chan struct{} { return s.wake }

// deliveryColumns are a delivery's columns, with its payload: its event's,
// when it has one.
const deliveryColumns = `id, business_id, message_id, endpoint, url, headers, coalesce(event_id, ''),
	coalesce(payload, (SELECT ev.payload FROM events ev WHERE ev.business_id = deliveries.business_id AND ev.id = deliveries.event_id)),
	status, attempts, next_attempt_at, last_status, last_error, last_response, created_at, updated_at`

func scanDelivery(row scanner, extra ...any) (*objects.Delivery, error) {
	d := &objects.Delivery{}
	var headers string
	var next, created, updated int64
	dest := append([]any{&d.ID, &d.BusinessID, &d.MessageID, &d.Endpoint, &d.URL, &headers, &d.EventID, &d.Payload, &d.Status, &d.Attempts, &next,
		&d.LastStatus, &d.LastError, &d.LastResponse, &created, &updated}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(headers), &d.Headers); err != nil {
		return nil, fmt.Errorf("delivery %s: headers: %w", d.ID, err)
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(next), fromMicros(created), fromMicros(updated)
	return d, nil
}

func (s *Store) ClaimDeliveries(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]*objects.Delivery, error) {
	var out []*objects.Delivery
	err := s.do(ctx, func(c *sql.Conn) error {
		out = out[:0]
		rows, err := c.QueryContext(bg, `UPDATE deliveries SET lease_owner = ?, next_attempt_at = ?
			WHERE id IN (SELECT d.id FROM deliveries d INDEXED BY deliveries_due
				WHERE d.status = 'pending' AND d.held = 0 AND d.next_attempt_at <= ?
				AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.business_id = d.business_id AND e.name = d.endpoint AND e.disabled_at IS NULL)
				ORDER BY d.next_attempt_at LIMIT ?)
			RETURNING `+deliveryColumns+`,
				(SELECT secret FROM webhook_endpoints e WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint)`,
			owner, micros(now.Add(lease)), micros(now), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
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
	return s.do(ctx, func(c *sql.Conn) error {
		for _, a := range as {
			if err := recordAttempt(c, a); err != nil {
				return fmt.Errorf("recording an attempt of delivery %s: %w", a.DeliveryID, err)
			}
		}
		return nil
	})
}

func recordAttempt(c *sql.Conn, a objects.Attempt) error {
	status := objects.DeliveryPending
	switch {
	case a.OK:
		status = objects.DeliverySucceeded
	case a.Next.IsZero():
		status = objects.DeliveryFailed
	}
	if _, err := c.ExecContext(bg, `UPDATE deliveries SET status = ?, attempts = attempts + 1, next_attempt_at = ?,
		last_status = ?, last_error = ?, last_response = ?, updated_at = ?, lease_owner = '',
		held = coalesce((SELECT e.disabled_at IS NOT NULL FROM webhook_endpoints e
			WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint), 0)
		WHERE id = ? AND lease_owner = ?`,
		status, micros(a.Next), a.Status, a.Error, a.Response, micros(a.At), a.DeliveryID, a.Owner); err != nil {
		return err
	}
	// The endpoint's state follows every attempt made, also one whose
	// lease was lost meanwhile: it did reach the endpoint, or fail to.
	if a.OK {
		_, err := c.ExecContext(bg, "UPDATE webhook_endpoints SET failing_since = NULL WHERE business_id = ? AND name = ? AND failing_since IS NOT NULL",
			a.BusinessID, a.Endpoint)
		return err
	}
	if _, err := c.ExecContext(bg, "UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, ?) WHERE business_id = ? AND name = ?",
		micros(a.At), a.BusinessID, a.Endpoint); err != nil {
		return err
	}
	reason := a.Disable
	if reason == "" {
		reason = fmt.Sprintf("every delivery failed for %s", a.FailingFor)
	}
	res, err := c.ExecContext(bg, `UPDATE webhook_endpoints SET disabled_at = ?, disabled_reason = ?
		WHERE business_id = ? AND name = ? AND disabled_at IS NULL AND (? OR failing_since <= ?)`,
		micros(a.At), reason, a.BusinessID, a.Endpoint, a.Disable != "", micros(a.At.Add(-a.FailingFor)))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return holdDeliveries(c, a.BusinessID, a.Endpoint)
	}
	return nil
}

// holdDeliveries takes a disabled endpoint's pending deliveries out of
// what the dispatcher looks at.
func holdDeliveries(c *sql.Conn, businessID, endpoint string) error {
	_, err := c.ExecContext(bg, "UPDATE deliveries SET held = 1 WHERE business_id = ? AND endpoint = ? AND status = 'pending' AND held = 0",
		businessID, endpoint)
	return err
}

func (s *Store) NextDeliveryAt(ctx context.Context) (time.Time, bool, error) {
	var next sql.NullInt64
	err := s.read.QueryRowContext(context.WithoutCancel(ctx), `SELECT d.next_attempt_at FROM deliveries d INDEXED BY deliveries_due
		WHERE d.status = 'pending' AND d.held = 0
		AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.business_id = d.business_id AND e.name = d.endpoint AND e.disabled_at IS NULL)
		ORDER BY d.next_attempt_at LIMIT 1`).Scan(&next)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil || !next.Valid {
		return time.Time{}, false, err
	}
	return fromMicros(next.Int64), true, nil
}

func (s *Store) Deliveries(ctx context.Context, businessID, status string, limit int) ([]*objects.Delivery, error) {
	rows, err := s.read.QueryContext(context.WithoutCancel(ctx), "SELECT "+deliveryColumns+` FROM deliveries
		WHERE business_id = ? AND (? = '' OR status = ?) ORDER BY created_at DESC, id DESC LIMIT ?`, businessID, status, status, limit)
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
	return s.do(ctx, func(c *sql.Conn) error {
		res, err := c.ExecContext(bg, `UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?, lease_owner = '',
			updated_at = ?, held = coalesce((SELECT e.disabled_at IS NOT NULL FROM webhook_endpoints e
				WHERE e.business_id = deliveries.business_id AND e.name = deliveries.endpoint), 0)
			WHERE business_id = ? AND id = ?`, micros(now), micros(now), businessID, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("delivery %s: %w", id, objects.ErrNotFound)
		}
		s.deliveriesAdded.Store(true)
		return nil
	})
}

func (s *Store) Endpoints(ctx context.Context, businessID string) ([]*objects.Endpoint, error) {
	rows, err := s.read.QueryContext(context.WithoutCancel(ctx), `SELECT name, secret, disabled_at, disabled_reason, failing_since, created_at
		FROM webhook_endpoints WHERE business_id = ? ORDER BY name`, businessID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.Endpoint
	for rows.Next() {
		e := &objects.Endpoint{BusinessID: businessID}
		var disabled, failing sql.NullInt64
		var created int64
		if err := rows.Scan(&e.Name, &e.Secret, &disabled, &e.DisabledReason, &failing, &created); err != nil {
			return nil, err
		}
		e.Disabled, e.DisabledAt, e.FailingSince, e.CreatedAt = disabled.Valid, fromNullMicros(disabled), fromNullMicros(failing), fromMicros(created)
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) EnableEndpoint(ctx context.Context, businessID, name string) error {
	return s.do(ctx, func(c *sql.Conn) error {
		res, err := c.ExecContext(bg, `UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = '', failing_since = NULL
			WHERE business_id = ? AND name = ?`, businessID, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("webhook %s: %w", name, objects.ErrNotFound)
		}
		if _, err := c.ExecContext(bg, "UPDATE deliveries SET held = 0 WHERE business_id = ? AND endpoint = ? AND status = 'pending' AND held = 1",
			businessID, name); err != nil {
			return err
		}
		s.deliveriesAdded.Store(true)
		return nil
	})
}

func (s *Store) DisableEndpoint(ctx context.Context, businessID, name, reason string, at time.Time) error {
	return s.do(ctx, func(c *sql.Conn) error {
		var found int
		err := c.QueryRowContext(bg, "SELECT count(*) FROM webhook_endpoints WHERE business_id = ? AND name = ?", businessID, name).Scan(&found)
		if err != nil {
			return err
		}
		if found == 0 {
			return fmt.Errorf("webhook %s: %w", name, objects.ErrNotFound)
		}
		if _, err = c.ExecContext(bg, `UPDATE webhook_endpoints SET disabled_at = ?, disabled_reason = ?
			WHERE business_id = ? AND name = ? AND disabled_at IS NULL`, micros(at), reason, businessID, name); err != nil {
			return err
		}
		return holdDeliveries(c, businessID, name)
	})
}

const inboundColumns = "business_id, name, token_hash, token_hint, secret, created_at, rotated_at"

func scanInbound(row scanner) (*objects.Inbound, error) {
	in := &objects.Inbound{}
	var created, rotated int64
	if err := row.Scan(&in.BusinessID, &in.Name, &in.TokenHash, &in.TokenHint, &in.Secret, &created, &rotated); err != nil {
		return nil, err
	}
	in.CreatedAt, in.RotatedAt = fromMicros(created), fromMicros(rotated)
	return in, nil
}

func (s *Store) InboundByTokenHash(ctx context.Context, hash string) (*objects.Inbound, error) {
	in, err := scanInbound(s.read.QueryRowContext(context.WithoutCancel(ctx), "SELECT "+inboundColumns+" FROM inbound_webhooks WHERE token_hash = ?", hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, objects.ErrNotFound
	}
	return in, err
}

func (s *Store) Inbounds(ctx context.Context, businessID string) ([]*objects.Inbound, error) {
	rows, err := s.read.QueryContext(context.WithoutCancel(ctx), "SELECT "+inboundColumns+" FROM inbound_webhooks WHERE business_id = ? ORDER BY name", businessID)
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
	return s.do(ctx, func(c *sql.Conn) error {
		res, err := c.ExecContext(bg, "UPDATE inbound_webhooks SET token_hash = ?, token_hint = ?, rotated_at = ? WHERE business_id = ? AND name = ?",
			tokenHash, tokenHint, micros(at), businessID, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("inbound webhook %s: %w", name, objects.ErrNotFound)
		}
		return nil
	})
}

func (s *Store) PruneInboundAnswers(ctx context.Context, before time.Time) error {
	return s.do(ctx, func(c *sql.Conn) error {
		_, err := c.ExecContext(bg, "DELETE FROM inbound_answers WHERE created_at < ?", micros(before))
		return err
	})
}
