package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crmd/crmd/objects"
)

// CreateBusiness stores a new business.
func (s *Store) CreateBusiness(ctx context.Context, b *objects.Business) error {
	err := pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		if _, err := t.Exec(ctx, "INSERT INTO businesses (id, name, created_at) VALUES ($1, $2, $3)", b.ID, b.Name, b.CreatedAt); err != nil {
			return err
		}
		_, err := t.Exec(ctx, "CREATE SEQUENCE "+eventSeq(b.ID))
		return err
	})
	if isUniqueViolation(err) {
		return fmt.Errorf("business %q: %w", b.Name, objects.ErrConflict)
	}
	return err
}

// Business returns the business with the given id or, failing that, name.
func (s *Store) Business(ctx context.Context, idOrName string) (*objects.Business, error) {
	var b objects.Business
	err := s.pool.QueryRow(ctx, "SELECT id, name, created_at FROM businesses WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1", idOrName).
		Scan(&b.ID, &b.Name, &b.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("business %q: %w", idOrName, objects.ErrNotFound)
	}
	b.CreatedAt = b.CreatedAt.UTC()
	return &b, err
}

// Businesses returns every business, oldest first.
func (s *Store) Businesses(ctx context.Context) ([]*objects.Business, error) {
	rows, err := s.pool.Query(ctx, "SELECT id, name, created_at FROM businesses ORDER BY created_at, id")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*objects.Business, error) {
		var b objects.Business
		err := row.Scan(&b.ID, &b.Name, &b.CreatedAt)
		b.CreatedAt = b.CreatedAt.UTC()
		return &b, err
	})
}

// CreateAPIKey stores a new key.
func (s *Store) CreateAPIKey(ctx context.Context, k *objects.APIKey) error {
	_, err := s.pool.Exec(ctx, "INSERT INTO api_keys (business_id, id, name, prefix, hash, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
		k.BusinessID, k.ID, k.Name, k.Prefix, k.Hash, k.CreatedAt)
	return err
}

const keyColumns = "business_id, id, name, prefix, hash, created_at, last_used_at, revoked_at"

func scanKey(row pgx.Row) (*objects.APIKey, error) {
	var (
		k          objects.APIKey
		used, revd *time.Time
	)
	if err := row.Scan(&k.BusinessID, &k.ID, &k.Name, &k.Prefix, &k.Hash, &k.CreatedAt, &used, &revd); err != nil {
		return nil, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	if used != nil {
		k.LastUsedAt = used.UTC()
	}
	if revd != nil {
		k.RevokedAt = revd.UTC()
	}
	return &k, nil
}

// APIKeys returns the keys of a business, oldest first.
func (s *Store) APIKeys(ctx context.Context, businessID string) ([]*objects.APIKey, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE business_id = $1 ORDER BY created_at, id", businessID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*objects.APIKey, error) { return scanKey(row) })
}

// APIKeyByHash returns the key with the given hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (*objects.APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE hash = $1", hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, objects.ErrNotFound
	}
	return k, err
}

// RevokeAPIKey marks a key revoked.
func (s *Store) RevokeAPIKey(ctx context.Context, businessID, keyID string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, "UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE business_id = $2 AND id = $3", at, businessID, keyID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("key %s: %w", keyID, objects.ErrNotFound)
	}
	return nil
}

// TouchAPIKeys records when keys were last used.
func (s *Store) TouchAPIKeys(ctx context.Context, uses []objects.KeyUse) error {
	b := &pgx.Batch{}
	for _, u := range uses {
		b.Queue("UPDATE api_keys SET last_used_at = $1 WHERE business_id = $2 AND id = $3 AND (last_used_at IS NULL OR last_used_at < $1)",
			u.At, u.BusinessID, u.KeyID)
	}
	return s.pool.SendBatch(ctx, b).Close()
}
