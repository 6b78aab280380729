package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/crmd/crmd/objects"
)

// bg runs the writer's statements; see runBatch for why they do not use the
// writers' contexts.
var bg = context.Background()

func (t *tx) Claim(ctx context.Context, object, field, value, id string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if _, err := t.s.conn.ExecContext(bg, "INSERT INTO unique_values VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		t.business, object, field, value, id); err != nil {
		return "", fmt.Errorf("claiming a unique value: %w", err)
	}
	var holder string
	if err := t.s.conn.QueryRowContext(bg, "SELECT record_id FROM unique_values WHERE business_id = ? AND object = ? AND field = ? AND value = ?",
		t.business, object, field, value).Scan(&holder); err != nil {
		return "", fmt.Errorf("claiming a unique value: %w", err)
	}
	if holder == id {
		return "", nil
	}
	return holder, nil
}

func (t *tx) Release(ctx context.Context, object, field, value, id string) error {
	_, err := t.s.conn.ExecContext(bg, "DELETE FROM unique_values WHERE business_id = ? AND object = ? AND field = ? AND value = ? AND record_id = ?",
		t.business, object, field, value, id)
	return err
}

func (t *tx) ReleaseField(ctx context.Context, object, field string) error {
	_, err := t.s.conn.ExecContext(bg, "DELETE FROM unique_values WHERE business_id = ? AND object = ? AND field = ?", t.business, object, field)
	return err
}

// ScanRecords reads the records in pages, so that fn may write while it
// runs: the connection is not in the middle of a query.
func (t *tx) ScanRecords(ctx context.Context, object string, fn func(*objects.Record) error) error {
	var after int64 = -1
	for {
		rows, err := t.s.conn.QueryContext(bg, "SELECT seq, "+recordColumns+" FROM records WHERE business_id = ? AND object = ? AND seq > ? ORDER BY seq LIMIT 1000",
			t.business, object, after)
		if err != nil {
			return err
		}
		var page []*objects.Record
		for rows.Next() {
			var seq int64
			r := &objects.Record{Object: object}
			var cat, uat int64
			if err := rows.Scan(&seq, &r.ID, &r.Data, &cat, &uat); err != nil {
				rows.Close()
				return err
			}
			r.CreatedAt, r.UpdatedAt = fromMicros(cat), fromMicros(uat)
			page, after = append(page, r), seq
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

func (t *tx) CountRecords(ctx context.Context, object string) (int, error) {
	var n int
	err := t.s.conn.QueryRowContext(bg, "SELECT count(*) FROM records WHERE business_id = ? AND object = ?", t.business, object).Scan(&n)
	return n, err
}

func (t *tx) FieldInUse(ctx context.Context, object, field string) (bool, error) {
	var one int
	err := t.s.conn.QueryRowContext(bg, `SELECT 1 FROM records WHERE business_id = ? AND object = ? AND json_extract(data, '$."' || ? || '"') IS NOT NULL LIMIT 1`,
		t.business, object, field).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// LockPacks needs no lock of its own: the writer holds the database's.
func (t *tx) LockPacks(ctx context.Context) error {
	_, err := t.s.conn.ExecContext(bg, "INSERT INTO pack_state VALUES (?, 0) ON CONFLICT DO NOTHING", t.business)
	return err
}

const packColumns = "r.business_id, r.pack, r.revision, r.hash, r.created_at, r.created_by"

func scanPack(row scanner, withFiles bool, extra ...any) (*objects.PackRevision, error) {
	var (
		p     objects.PackRevision
		at    int64
		files string
	)
	dest := []any{&p.BusinessID, &p.Pack, &p.Revision, &p.Hash, &at, &p.CreatedBy}
	if withFiles {
		dest = append(dest, &files)
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	p.CreatedAt = fromMicros(at)
	if withFiles {
		if err := json.Unmarshal([]byte(files), &p.Files); err != nil {
			return nil, fmt.Errorf("pack %s revision %d: %w", p.Pack, p.Revision, err)
		}
	}
	return &p, nil
}

func activePacks(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, businessID string) ([]*objects.PackRevision, error) {
	rows, err := q.QueryContext(ctx, "SELECT "+packColumns+`, r.files FROM pack_active a
		JOIN pack_revisions r ON r.business_id = a.business_id AND r.pack = a.pack AND r.revision = a.revision
		WHERE a.business_id = ? ORDER BY r.pack`, businessID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.PackRevision
	for rows.Next() {
		p, err := scanPack(rows, true)
		if err != nil {
			return nil, err
		}
		p.Active = true
		out = append(out, p)
	}
	return out, rows.Err()
}

func (t *tx) TxActivePacks(ctx context.Context) ([]*objects.PackRevision, error) {
	return activePacks(bg, t.s.conn, t.business)
}

func (t *tx) SavePackRevision(ctx context.Context, rev *objects.PackRevision) error {
	if err := t.s.conn.QueryRowContext(bg, "SELECT coalesce(max(revision), 0) + 1 FROM pack_revisions WHERE business_id = ? AND pack = ?",
		t.business, rev.Pack).Scan(&rev.Revision); err != nil {
		return err
	}
	files, err := json.Marshal(rev.Files)
	if err != nil {
		return err
	}
	rev.BusinessID = t.business
	_, err = t.s.conn.ExecContext(bg, "INSERT INTO pack_revisions VALUES (?, ?, ?, ?, ?, ?, ?)",
		t.business, rev.Pack, rev.Revision, string(files), rev.Hash, micros(rev.CreatedAt), rev.CreatedBy)
	return err
}

func (t *tx) ActivatePack(ctx context.Context, pack string, revision int, by string, at time.Time) error {
	if _, err := t.s.conn.ExecContext(bg, `INSERT INTO pack_active VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (business_id, pack) DO UPDATE SET revision = excluded.revision, activated_at = excluded.activated_at, activated_by = excluded.activated_by`,
		t.business, pack, revision, micros(at), by); err != nil {
		return fmt.Errorf("activating pack %s revision %d: %w", pack, revision, err)
	}
	_, err := t.s.conn.ExecContext(bg, `INSERT INTO pack_state VALUES (?, 1)
		ON CONFLICT (business_id) DO UPDATE SET generation = generation + 1`, t.business)
	return err
}

// ActivePacks returns the business's active pack revisions and generation.
func (s *Store) ActivePacks(ctx context.Context, businessID string) ([]*objects.PackRevision, int64, error) {
	rtx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, err
	}
	defer rtx.Rollback()
	var gen int64
	err = rtx.QueryRowContext(ctx, "SELECT generation FROM pack_state WHERE business_id = ?", businessID).Scan(&gen)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, 0, err
	}
	packs, err := activePacks(ctx, rtx, businessID)
	return packs, gen, err
}

// PackGenerations returns the pack generations of the given businesses.
func (s *Store) PackGenerations(ctx context.Context, businessIDs []string) (map[string]int64, error) {
	out := map[string]int64{}
	for len(businessIDs) > 0 {
		chunk := businessIDs[:min(len(businessIDs), 500)]
		businessIDs = businessIDs[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.read.QueryContext(ctx, "SELECT business_id, generation FROM pack_state WHERE business_id IN (?"+strings.Repeat(", ?", len(chunk)-1)+")", args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			var gen int64
			if err := rows.Scan(&id, &gen); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = gen
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PackRevisions lists a business's pack revisions without their files.
func (s *Store) PackRevisions(ctx context.Context, businessID string) ([]*objects.PackRevision, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT "+packColumns+`, a.revision IS NOT NULL FROM pack_revisions r
		LEFT JOIN pack_active a ON a.business_id = r.business_id AND a.pack = r.pack AND a.revision = r.revision
		WHERE r.business_id = ? ORDER BY r.pack, r.revision DESC`, businessID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*objects.PackRevision
	for rows.Next() {
		var active bool
		p, err := scanPack(rows, false, &active)
		if err != nil {
			return nil, err
		}
		p.Active = active
		out = append(out, p)
	}
	return out, rows.Err()
}

// PackRevision returns one revision with its files.
func (s *Store) PackRevision(ctx context.Context, businessID, pack string, revision int) (*objects.PackRevision, error) {
	var active bool
	p, err := scanPack(s.read.QueryRowContext(ctx, "SELECT "+packColumns+`, r.files, a.revision IS NOT NULL FROM pack_revisions r
		LEFT JOIN pack_active a ON a.business_id = r.business_id AND a.pack = r.pack AND a.revision = r.revision
		WHERE r.business_id = ? AND r.pack = ? AND r.revision = ?`, businessID, pack, revision), true, &active)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pack %s revision %d: %w", pack, revision, objects.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	p.Active = active
	return p, nil
}
