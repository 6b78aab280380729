// Package sqlite is the embedded store: one SQLite file, no setup.
//
// One connection writes. Writes that arrive while a commit is syncing wait in
// a queue, and the next transaction takes all of them, each inside its own
// savepoint so that one failing write rolls back alone (group commit). Every
// commit is synced with synchronous=FULL before any of its writers is
// answered. A pool of read-only connections serves reads beside the writer,
// which WAL mode allows.
package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/crmd/crmd/objects"
)

func init() {
	// For migration 0005, which hashes the inbound tokens stored before it.
	sqlite.MustRegisterDeterministicScalarFunction("crmd_sha256_hex", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		var b []byte
		switch v := args[0].(type) {
		case string:
			b = []byte(v)
		case []byte:
			b = v
		default:
			return nil, fmt.Errorf("crmd_sha256_hex: a %T", v)
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:]), nil
	})
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// maxBatch bounds how many writes share one transaction.
const maxBatch = 512

// busyTimeout is how long a connection waits for a lock held by another
// process, such as an operator command writing while the server runs.
const busyTimeout = 10 * time.Second

// Store is the SQLite implementation of objects.Store.
type Store struct {
	read   *sql.DB
	write  *sql.DB
	conn   *sql.Conn // the one writing connection
	stmts  writeStmts
	reads  readStmts
	queue  chan *writeReq
	quit   chan struct{}
	done   chan struct{}
	closed sync.Once
	log    *slog.Logger

	// deliveriesAdded is set by a write that adds deliveries; the writer
	// wakes the dispatcher after it commits.
	deliveriesAdded atomic.Bool
	wake            chan struct{}
}

var _ objects.Store = (*Store)(nil)

// Open opens (creating it if needed) the database at path and brings its
// schema up to date.
func Open(ctx context.Context, path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_busy_timeout=" + fmt.Sprint(busyTimeout.Milliseconds()) +
		"&_pragma=cache_size(-16000)&_pragma=temp_store(memory)"
	write, err := sql.Open("sqlite", base+"&_journal_mode=WAL&_synchronous=FULL&_foreign_keys=on")
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	conn, err := write.Conn(ctx)
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	s := &Store{
		write: write,
		conn:  conn,
		queue: make(chan *writeReq, maxBatch),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
		log:   log,
		wake:  make(chan struct{}, 1),
	}
	if err := s.migrate(ctx); err != nil {
		conn.Close()
		write.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	if err := s.stmts.prepare(ctx, conn); err != nil {
		conn.Close()
		write.Close()
		return nil, err
	}
	s.read, err = sql.Open("sqlite", base+"&_query_only=on")
	if err != nil {
		s.stmts.close()
		conn.Close()
		write.Close()
		return nil, err
	}
	readers := max(4, 2*runtime.GOMAXPROCS(0))
	s.read.SetMaxOpenConns(readers)
	s.read.SetMaxIdleConns(readers)
	if err := s.reads.prepare(ctx, s.read); err != nil {
		s.stmts.close()
		conn.Close()
		write.Close()
		s.read.Close()
		return nil, err
	}
	go s.writer()
	return s, nil
}

// Close stops the writer after the writes already queued and closes the
// database.
func (s *Store) Close() error {
	s.closed.Do(func() {
		close(s.quit)
		<-s.done
		s.stmts.close()
		s.reads.close()
		s.conn.Close()
		s.write.Close()
		s.read.Close()
	})
	return nil
}

// Ping reports whether the database file can be read.
func (s *Store) Ping(ctx context.Context) error {
	var version int
	return s.read.QueryRowContext(ctx, "SELECT max(version) FROM schema_migrations").Scan(&version)
}

func (s *Store) migrate(ctx context.Context) error {
	ms, err := objects.LoadMigrations(mustSub(migrationFiles, "migrations"))
	if err != nil {
		return err
	}
	return s.exclusive(ctx, func(c *sql.Conn) error {
		if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			return err
		}
		var current int
		if err := c.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
			return err
		}
		pending, err := objects.Pending(ms, current)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := c.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if _, err := c.ExecContext(ctx, "INSERT INTO schema_migrations VALUES (?, ?, ?)", m.Version, m.Name, time.Now().UnixMicro()); err != nil {
				return err
			}
			s.log.Info("applied database migration", "version", m.Version, "name", m.Name)
		}
		return nil
	})
}

// exclusive runs fn on the writing connection in an immediate transaction,
// outside the write queue. Only Open uses it, before the writer starts.
func (s *Store) exclusive(ctx context.Context, fn func(*sql.Conn) error) error {
	if _, err := s.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err := fn(s.conn); err != nil {
		s.conn.ExecContext(context.Background(), "ROLLBACK")
		return err
	}
	_, err := s.conn.ExecContext(ctx, "COMMIT")
	return err
}

// micros and fromMicros convert times to and from the integer Unix
// microseconds the database holds.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

func mustSub(fsys embed.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}
