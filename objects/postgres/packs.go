package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crmd/crmd/objects"
)

func (t *tx) Claim(ctx context.Context, object, field, value, id string) (string, error) {
	// Each statement gets its own snapshot (READ COMMITTED): an insert that
	// waited for a concurrent claim of the same value and then did nothing
	// is followed by a SELECT that sees that claim. If the holder released
	// it in between, the insert is tried again.
	for range 3 {
		var holder string
		err := t.t.QueryRow(ctx, "INSERT INTO unique_values VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING record_id",
			t.business, object, field, value, id).Scan(&holder)
		if err == nil {
			return "", nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("claiming a unique value: %w", err)
		}
		err = t.t.QueryRow(ctx, "SELECT record_id FROM unique_values WHERE business_id = $1 AND object = $2 AND field = $3 AND value = $4",
			t.business, object, field, value).Scan(&holder)
		switch {
		case err == nil && holder == id:
			return "", nil
		case err == nil:
			return holder, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return "", fmt.Errorf("claiming a unique value: %w", err)
		}
	}
	return "", errors.New("claiming a unique value: it was taken and released three times over")
}

func (t *tx) Release(ctx context.Context, object, field, value, id string) error {
	_, err := t.t.Exec(ctx, "DELETE FROM unique_values WHERE business_id = $1 AND object = $2 AND field = $3 AND value = $4 AND record_id = $5",
		t.business, object, field, value, id)
	return err
}

func (t *tx) ReleaseField(ctx context.Context, object, field string) error {
	_, err := t.t.Exec(ctx, "DELETE FROM unique_values WHERE business_id = $1 AND object = $2 AND field = $3", t.business, object, field)
	return err
}

// ScanRecords reads the records in pages, so that fn may use the
// transaction while it runs.
func (t *tx) ScanRecords(ctx context.Context, object string, fn func(*objects.Record) error) error {
	after := ""
	for {
		rows, err := t.t.Query(ctx, "SELECT "+recordColumns+" FROM records WHERE business_id = $1 AND object = $2 AND id > $3 ORDER BY id LIMIT 1000",
			t.business, object, after)
		if err != nil {
			return err
		}
		page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*objects.Record, error) { return scanRecord(row, object) })
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
			after = r.ID
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

func (t *tx) CountRecords(ctx context.Context, object string) (int, error) {
	var n int
	err := t.t.QueryRow(ctx, "SELECT count(*) FROM records WHERE business_id = $1 AND object = $2", t.business, object).Scan(&n)
	return n, err
}

func (t *tx) FieldInUse(ctx context.Context, object, field string) (bool, error) {
	var ok bool
	err := t.t.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM records WHERE business_id = $1 AND object = $2 AND data -> $3 IS NOT NULL AND json_typeof(data -> $3) <> 'null')",
		t.business, object, field).Scan(&ok)
	return ok, err
}

// LockPacks locks the business's pack_state row, creating it first if need
// be, so that activations from any process follow one another.
func (t *tx) LockPacks(ctx context.Context) error {
	if _, err := t.t.Exec(ctx, "INSERT INTO pack_state VALUES ($1, 0) ON CONFLICT DO NOTHING", t.business); err != nil {
		return err
	}
	_, err := t.t.Exec(ctx, "SELECT 1 FROM pack_state WHERE business_id = $1 FOR UPDATE", t.business)
	return err
}

const packColumns = "r.business_id, r.pack, r.revision, r.hash, r.created_at, r.created_by"

func scanPack(row pgx.Row, withFiles bool, extra ...any) (*objects.PackRevision, error) {
	var (
		p     objects.PackRevision
		files []byte
	)
	dest := []any{&p.BusinessID, &p.Pack, &p.Revision, &p.Hash, &p.CreatedAt, &p.CreatedBy}
	if withFiles {
		dest = append(dest, &files)
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	if withFiles {
		if err := json.Unmarshal(files, &p.Files); err != nil {
			return nil, fmt.Errorf("pack %s revision %d: %w", p.Pack, p.Revision, err)
		}
	}
	return &p, nil
}

type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

func activePacks(ctx context.Context, q querier, businessID string) ([]*objects.PackRevision, error) {
	rows, err := q.Query(ctx, "SELECT "+packColumns+`, r.files FROM pack_active a
		JOIN pack_revisions r ON r.business_id = a.business_id AND r.pack = a.pack AND r.revision = a.revision
		WHERE a.business_id = $1 ORDER BY r.pack`, businessID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*objects.PackRevision, error) {
		p, err := scanPack(row, true)
		if p != nil {
			p.Active = true
		}
		return p, err
	})
}

func (t *tx) TxActivePacks(ctx context.Context) ([]*objects.PackRevision, error) {
	return activePacks(ctx, t.t, t.business)
}

func (t *tx) SavePackRevision(ctx context.Context, rev *objects.PackRevision) error {
	files, err := json.Marshal(rev.Files)
	if err != nil {
		return err
	}
	rev.BusinessID = t.business
	return t.t.QueryRow(ctx, `INSERT INTO pack_revisions
		SELECT $1, $2, coalesce(max(revision), 0) + 1, $3, $4, $5, $6 FROM pack_revisions WHERE business_id = $1 AND pack = $2
		RETURNING revision`, t.business, rev.Pack, string(files), rev.Hash, rev.CreatedAt, rev.CreatedBy).Scan(&rev.Revision)
}

func (t *tx) ActivatePack(ctx context.Context, pack string, revision int, by string, at time.Time) error {
	if _, err := t.t.Exec(ctx, `INSERT INTO pack_active VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (business_id, pack) DO UPDATE SET revision = excluded.revision, activated_at = excluded.activated_at, activated_by = excluded.activated_by`,
		t.business, pack, revision, at, by); err != nil {
		return fmt.Errorf("activating pack %s revision %d: %w", pack, revision, err)
	}
	_, err := t.t.Exec(ctx, `INSERT INTO pack_state VALUES ($1, 1)
		ON CONFLICT (business_id) DO UPDATE SET generation = pack_state.generation + 1`, t.business)
	return err
}

// ActivePacks returns the business's active pack revisions and generation,
// read in one snapshot.
func (s *Store) ActivePacks(ctx context.Context, businessID string) ([]*objects.PackRevision, int64, error) {
	var (
		packs []*objects.PackRevision
		gen   int64
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(t pgx.Tx) error {
		err := t.QueryRow(ctx, "SELECT generation FROM pack_state WHERE business_id = $1", businessID).Scan(&gen)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		packs, err = activePacks(ctx, t, businessID)
		return err
	})
	return packs, gen, err
}

// PackGenerations returns the pack generations of the given businesses.
func (s *Store) PackGenerations(ctx context.Context, businessIDs []string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, "SELECT business_id, generation FROM pack_state WHERE business_id = ANY($1)", businessIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var gen int64
		if err := rows.Scan(&id, &gen); err != nil {
			return nil, err
		}
		out[id] = gen
	}
	return out, rows.Err()
}

// PackRevisions lists a business's pack revisions without their files.
func (s *Store) PackRevisions(ctx context.Context, businessID string) ([]*objects.PackRevision, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+packColumns+`, a.revision IS NOT NULL FROM pack_revisions r
		LEFT JOIN pack_active a ON a.business_id = r.business_id AND a.pack = r.pack AND a.revision = r.revision
		WHERE r.business_id = $1 ORDER BY r.pack, r.revision DESC`, businessID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*objects.PackRevision, error) {
		var active bool
		p, err := scanPack(row, false, &active)
		if p != nil {
			p.Active = active
		}
		return p, err
	})
}

// PackRevision returns one revision with its files.
func (s *Store) PackRevision(ctx context.Context, businessID, pack string, revision int) (*objects.PackRevision, error) {
	var active bool
	p, err := scanPack(s.pool.QueryRow(ctx, "SELECT "+packColumns+`, r.files, a.revision IS NOT NULL FROM pack_revisions r
		LEFT JOIN pack_active a ON a.business_id = r.business_id AND a.pack = r.pack AND a.revision = r.revision
		WHERE r.business_id = $1 AND r.pack = $2 AND r.revision = $3`, businessID, pack, revision), true, &active)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pack %s revision %d: %w", pack, revision, objects.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	p.Active = active
	return p, nil
}
