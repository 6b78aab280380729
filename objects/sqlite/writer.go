package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/crmd/crmd/objects"
)

var errClosed = errors.New("sqlite store: closed")

type writeReq struct {
	ctx  context.Context
	fn   func(c *sql.Conn) error
	done chan error
}

// do queues fn to run on the writing connection inside a transaction, and
// returns once that transaction is durable (nil) or rolled back (the error).
func (s *Store) do(ctx context.Context, fn func(c *sql.Conn) error) error {
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.queue <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return errClosed
	}
	select {
	case err := <-req.done:
		return err
	case <-s.done:
		select {
		case err := <-req.done:
			return err
		default:
			return errClosed
		}
	}
}

// writer runs the queued writes, as many at a time as are waiting, until
// Close; the writes queued before Close still run.
func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*writeReq, 0, maxBatch)
	for {
		select {
		case r := <-s.queue:
			batch = append(batch[:0], r)
		case <-s.quit:
			for {
				select {
				case r := <-s.queue:
					s.runBatch([]*writeReq{r})
				default:
					return
				}
			}
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case r := <-s.queue:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.runBatch(batch)
	}
}

// runBatch runs a batch of writes in one transaction, each in a savepoint,
// and answers each writer after the commit.
func (s *Store) runBatch(batch []*writeReq) {
	// Statements run without the writers' contexts: an interrupted statement
	// can roll back the whole transaction, and with it the other writes.
	ctx := context.Background()
	errs := make([]error, len(batch))
	abort := func(err error) {
		s.conn.ExecContext(ctx, "ROLLBACK")
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	if _, err := s.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		abort(fmt.Errorf("starting a write transaction: %w", err))
	} else {
		aborted := false
		for i, r := range batch {
			if err := r.ctx.Err(); err != nil {
				errs[i] = err
				continue
			}
			if _, err := s.stmts.savepoint.ExecContext(ctx); err != nil {
				abort(fmt.Errorf("opening a savepoint: %w", err))
				aborted = true
				break
			}
			if errs[i] = call(r.fn, s.conn); errs[i] != nil {
				if _, err := s.stmts.rollbackTo.ExecContext(ctx); err != nil {
					abort(fmt.Errorf("rolling back to a savepoint: %w", err))
					aborted = true
					break
				}
			}
			if _, err := s.stmts.release.ExecContext(ctx); err != nil {
				abort(fmt.Errorf("releasing a savepoint: %w", err))
				aborted = true
				break
			}
		}
		if !aborted {
			if _, err := s.conn.ExecContext(ctx, "COMMIT"); err != nil {
				abort(fmt.Errorf("committing: %w", err))
			} else if s.deliveriesAdded.Swap(false) {
				s.wakeDispatcher()
			}
		}
	}
	for i, r := range batch {
		r.done <- errs[i]
	}
}

// call runs fn, turning a panic into an error so that one bad write cannot
// take the writer, and every write queued behind it, down.
func call(fn func(*sql.Conn) error, c *sql.Conn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in write: %v", p)
		}
	}()
	return fn(c)
}

// writeStmts are the statements the writer runs, prepared once on its
// connection.
type writeStmts struct {
	savepoint, release, rollbackTo *sql.Stmt
	get, exists, insert, update    *sql.Stmt
	delete                         *sql.Stmt
	// The outbox: an event and its deliveries, in the write's transaction.
	nextSeq, insertEvent, insertDelivery *sql.Stmt
}

func (w *writeStmts) prepare(ctx context.Context, c *sql.Conn) error {
	return prepareAll(ctx, c, []stmtDef{
		{&w.savepoint, "SAVEPOINT w"},
		{&w.release, "RELEASE w"},
		{&w.rollbackTo, "ROLLBACK TO w"},
		{&w.get, "SELECT id, data, created_at, updated_at FROM records WHERE business_id = ? AND object = ? AND id = ?"},
		{&w.exists, "SELECT 1 FROM records WHERE business_id = ? AND object = ? AND id = ?"},
		{&w.insert, "INSERT INTO records (business_id, object, id, data, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)"},
		{&w.update, "UPDATE records SET data = ?, updated_at = ? WHERE business_id = ? AND object = ? AND id = ?"},
		{&w.delete, "DELETE FROM records WHERE business_id = ? AND object = ? AND id = ?"},
		{&w.nextSeq, "INSERT INTO event_seqs VALUES (?, 1) ON CONFLICT (business_id) DO UPDATE SET seq = seq + 1 RETURNING seq"},
		{&w.insertEvent, "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)"},
		{&w.insertDelivery, `INSERT INTO deliveries (id, business_id, message_id, endpoint, url, headers, event_id, payload,
			status, attempts, next_attempt_at, created_at, updated_at, held) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?,
			coalesce((SELECT disabled_at IS NOT NULL FROM webhook_endpoints WHERE business_id = ? AND name = ?), 0))`},
	})
}

func (w *writeStmts) close() {
	closeAll(w.savepoint, w.release, w.rollbackTo, w.get, w.exists, w.insert, w.update, w.delete, w.nextSeq, w.insertEvent, w.insertDelivery)
}

// readStmts are the statements of the hot read paths, prepared once on the
// read pool.
type readStmts struct {
	get, listFirst, listFrom, pages, keyByHash *sql.Stmt
}

func (r *readStmts) prepare(ctx context.Context, db *sql.DB) error {
	return prepareAll(ctx, db, []stmtDef{
		{&r.get, "SELECT " + recordColumns + " FROM records WHERE business_id = ? AND object = ? AND id = ?"},
		{&r.listFirst, "SELECT " + recordColumns + " FROM records WHERE business_id = ? AND object = ? ORDER BY seq LIMIT ?"},
		{&r.listFrom, "SELECT " + recordColumns + " FROM records WHERE business_id = ? AND object = ? AND seq >= ? ORDER BY seq LIMIT ? OFFSET ?"},
		{&r.pages, "SELECT page, n FROM record_pages WHERE business_id = ? AND object = ? ORDER BY page"},
		{&r.keyByHash, "SELECT " + keyColumns + " FROM api_keys WHERE hash = ?"},
	})
}

func (r *readStmts) close() {
	closeAll(r.get, r.listFirst, r.listFrom, r.pages, r.keyByHash)
}

type stmtDef struct {
	stmt **sql.Stmt
	sql  string
}

func prepareAll(ctx context.Context, p interface {
	PrepareContext(context.Context, string) (*sql.Stmt, error)
}, defs []stmtDef) error {
	for _, d := range defs {
		st, err := p.PrepareContext(ctx, d.sql)
		if err != nil {
			return fmt.Errorf("preparing %q: %w", d.sql, err)
		}
		*d.stmt = st
	}
	return nil
}

func closeAll(stmts ...*sql.Stmt) {
	for _, st := range stmts {
		if st != nil {
			st.Close()
		}
	}
}

// Write runs fn in the business's next write transaction.
func (s *Store) Write(ctx context.Context, businessID string, fn func(objects.Tx) error) error {
	return s.do(ctx, func(*sql.Conn) error {
		return fn(&tx{s: s, business: businessID})
	})
}

// tx is a write within a batch. Its methods run on the writer goroutine.
type tx struct {
	s        *Store
	business string
}

func (t *tx) Get(ctx context.Context, object, id string) (*objects.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := scanRecord(t.s.stmts.get.QueryRowContext(context.Background(), t.business, object, id), object)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &objects.NotFoundError{Object: object, ID: id}
	}
	return r, err
}

func (t *tx) Exists(ctx context.Context, object, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var one int
	err := t.s.stmts.exists.QueryRowContext(context.Background(), t.business, object, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t *tx) Insert(ctx context.Context, r *objects.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := t.s.stmts.insert.ExecContext(context.Background(), t.business, r.Object, r.ID, objects.EncodeFields(r.Fields), micros(r.CreatedAt), micros(r.UpdatedAt))
	if err != nil {
		return fmt.Errorf("inserting a %s record: %w", r.Object, err)
	}
	return nil
}

func (t *tx) Update(ctx context.Context, r *objects.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := t.s.stmts.update.ExecContext(context.Background(), objects.EncodeFields(r.Fields), micros(r.UpdatedAt), t.business, r.Object, r.ID)
	if err != nil {
		return fmt.Errorf("updating a %s record: %w", r.Object, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &objects.NotFoundError{Object: r.Object, ID: r.ID}
	}
	return nil
}

func (t *tx) Delete(ctx context.Context, object, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := t.s.stmts.delete.ExecContext(context.Background(), t.business, object, id)
	if err != nil {
		return fmt.Errorf("deleting a %s record: %w", object, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &objects.NotFoundError{Object: object, ID: id}
	}
	return nil
}
