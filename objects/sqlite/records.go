package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/crmd/crmd/objects"
)

// pageBits is log2 of the seq values a record_pages row counts; it must match
// the triggers in the migrations.
const pageBits = 10

const recordColumns = "id, data, created_at, updated_at"

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner, object string) (*objects.Record, error) {
	var (
		r        = &objects.Record{Object: object}
		data     []byte
		cat, uat int64
	)
	if err := row.Scan(&r.ID, &data, &cat, &uat); err != nil {
		return nil, err
	}
	r.Data, r.CreatedAt, r.UpdatedAt = data, fromMicros(cat), fromMicros(uat)
	return r, nil
}

// Reads run without their callers' cancellation: they are short and
// bounded (a page is at most objects.MaxPageSize records, and an offset costs
// one page of counts), and for a cancellable context the driver starts a
// goroutine and a progress callback on every statement, which cost more than
// most of these statements do.

// Get returns one record of the business.
func (s *Store) Get(ctx context.Context, businessID, object, id string) (*objects.Record, error) {
	ctx = context.WithoutCancel(ctx)
	r, err := scanRecord(s.reads.get.QueryRowContext(ctx, businessID, object, id), object)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &objects.NotFoundError{Object: object, ID: id}
	}
	return r, err
}

// List returns a page of records in seq order. For an offset it first finds
// the page of seq values that holds the record at that offset, from the
// per-page counts, so that it steps over at most one page of records.
func (s *Store) List(ctx context.Context, businessID, object string, limit, offset int) ([]*objects.Record, error) {
	ctx = context.WithoutCancel(ctx)
	if offset == 0 {
		rows, err := s.reads.listFirst.QueryContext(ctx, businessID, object, limit)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", object, err)
		}
		return collect(rows, object)
	}
	// One read transaction, so the counts and the records agree.
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", object, err)
	}
	defer tx.Rollback()
	page, skip, found, err := s.findPage(ctx, tx, businessID, object, offset)
	if err != nil || !found {
		return nil, err
	}
	rows, err := tx.StmtContext(ctx, s.reads.listFrom).QueryContext(ctx, businessID, object, page<<pageBits, limit, skip)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", object, err)
	}
	return collect(rows, object)
}

// findPage returns the first seq page holding the record at offset, and how
// many of the object's records in that page come before it.
func (s *Store) findPage(ctx context.Context, tx *sql.Tx, businessID, object string, offset int) (page int64, skip int, found bool, err error) {
	rows, err := tx.StmtContext(ctx, s.reads.pages).QueryContext(ctx, businessID, object)
	if err != nil {
		return 0, 0, false, fmt.Errorf("counting %s: %w", object, err)
	}
	defer rows.Close()
	before := 0
	for rows.Next() {
		var n int
		if err := rows.Scan(&page, &n); err != nil {
			return 0, 0, false, err
		}
		if before+n > offset {
			return page, offset - before, true, nil
		}
		before += n
	}
	return 0, 0, false, rows.Err()
}

func collect(rows *sql.Rows, object string) ([]*objects.Record, error) {
	defer rows.Close()
	var out []*objects.Record
	for rows.Next() {
		r, err := scanRecord(rows, object)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", object, err)
	}
	return out, nil
}
