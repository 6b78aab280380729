package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/crmd/crmd/objects"
)

// CreateBusiness stores a new business.
func (s *Store) CreateBusiness(ctx context.Context, b *objects.Business) error {
	return s.do(ctx, func(c *sql.Conn) error {
		_, err := c.ExecContext(context.Background(), "INSERT INTO businesses (id, name, created_at) VALUES (?, ?, ?)", b.ID, b.Name, micros(b.CreatedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("business %q: %w", b.Name, objects.ErrConflict)
		}
		return err
	})
}

// Business returns the business with the given id or, failing that, name.
func (s *Store) Business(ctx context.Context, idOrName string) (*objects.Business, error) {
	var (
		b  objects.Business
		at int64
	)
	err := s.read.QueryRowContext(ctx, "SELECT id, name, created_at FROM businesses WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1", idOrName).
		Scan(&b.ID, &b.Name, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("business %q: %w", idOrName, objects.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	b.CreatedAt = fromMicros(at)
	return &b, nil
}

// Businesses returns every business, oldest first.
func (s *Store) Businesses(ctx context.Context) ([]*objects.Business, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT id, name, created_at FROM businesses ORDER BY created_at, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.Business
	for rows.Next() {
		var (
			b  objects.Business
			at int64
		)
		if err := rows.Scan(&b.ID, &b.Name, &at); err != nil {
			return nil, err
		}
		b.CreatedAt = fromMicros(at)
		out = append(out, &b)
	}
	return out, rows.Err()
}

// CreateAPIKey stores a new key.
func (s *Store) CreateAPIKey(ctx context.Context, k *objects.APIKey) error {
	return s.do(ctx, func(c *sql.Conn) error {
		_, err := c.ExecContext(context.Background(), "INSERT INTO api_keys (business_id, id, name, prefix, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
			k.BusinessID, k.ID, k.Name, k.Prefix, k.Hash, micros(k.CreatedAt))
		return err
	})
}

const keyColumns = "business_id, id, name, prefix, hash, created_at, last_used_at, revoked_at"

func scanKey(row scanner) (*objects.APIKey, error) {
	var (
		k          objects.APIKey
		at         int64
		used, revd sql.NullInt64
	)
	if err := row.Scan(&k.BusinessID, &k.ID, &k.Name, &k.Prefix, &k.Hash, &at, &used, &revd); err != nil {
		return nil, err
	}
	k.CreatedAt, k.LastUsedAt, k.RevokedAt = fromMicros(at), fromNullMicros(used), fromNullMicros(revd)
	return &k, nil
}

// APIKeys returns the keys of a business, oldest first.
func (s *Store) APIKeys(ctx context.Context, businessID string) ([]*objects.APIKey, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE business_id = ? ORDER BY created_at, id", businessID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// APIKeyByHash returns the key with the given hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (*objects.APIKey, error) {
	ctx = context.WithoutCancel(ctx) // see Get
	k, err := scanKey(s.reads.keyByHash.QueryRowContext(ctx, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, objects.ErrNotFound
	}
	return k, err
}

// RevokeAPIKey marks a key revoked.
func (s *Store) RevokeAPIKey(ctx context.Context, businessID, keyID string, at time.Time) error {
	return s.do(ctx, func(c *sql.Conn) error {
		res, err := c.ExecContext(context.Background(), "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE business_id = ? AND id = ?",
			micros(at), businessID, keyID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("key %s: %w", keyID, objects.ErrNotFound)
		}
		return nil
	})
}

// TouchAPIKeys records when keys were last used.
func (s *Store) TouchAPIKeys(ctx context.Context, uses []objects.KeyUse) error {
	return s.do(ctx, func(c *sql.Conn) error {
		for _, u := range uses {
			_, err := c.ExecContext(context.Background(), "UPDATE api_keys SET last_used_at = ?1 WHERE business_id = ?2 AND id = ?3 AND (last_used_at IS NULL OR last_used_at < ?1)",
				micros(u.At), u.BusinessID, u.KeyID)
			if err != nil {
				return err
			}
		}
		return nil
	})
}
