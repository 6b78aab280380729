// Package storetest gives tests real stores: a SQLite file in a temporary
// directory, and a fresh PostgreSQL database, created for the test and
// dropped after it, on the server that CRMD_TEST_POSTGRES_URL names.
//
// Without CRMD_TEST_POSTGRES_URL the PostgreSQL tests skip and say how to
// run them. With it set, a server that cannot be reached fails the tests:
// they never skip quietly.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/postgres"
	"github.com/crmd/crmd/objects/sqlite"
)

// PostgresEnv is the environment variable that points the tests at a
// PostgreSQL server, as a URL of a database to connect to for creating test
// databases.
const PostgresEnv = "CRMD_TEST_POSTGRES_URL"

// Kinds are the stores every store-backed test runs against.
var Kinds = []string{"sqlite", "postgres"}

// Each runs fn as a subtest for each kind of store.
func Each(t *testing.T, fn func(t *testing.T, kind string)) {
	t.Helper()
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) { fn(t, kind) })
	}
}

// DSN returns the --db value of a new, empty database of the given kind,
// removed when the test ends.
func DSN(t testing.TB, kind string) string {
	t.Helper()
	switch kind {
	case "sqlite":
		return filepath.Join(t.TempDir(), "crmd.db")
	case "postgres":
		return PostgresURL(t)
	}
	t.Fatalf("storetest: unknown store kind %q", kind)
	return ""
}

// Open returns an open store of the given kind on a new, empty database.
func Open(t testing.TB, kind string) objects.Store {
	t.Helper()
	return OpenDSN(t, DSN(t, kind))
}

// OpenDSN opens the store at dsn and closes it when the test ends.
func OpenDSN(t testing.TB, dsn string) objects.Store {
	t.Helper()
	ctx := context.Background()
	var (
		s   objects.Store
		err error
	)
	if postgres.IsURL(dsn) {
		s, err = postgres.Open(ctx, dsn, nil)
	} else {
		s, err = sqlite.Open(ctx, dsn, nil)
	}
	if err != nil {
		t.Fatalf("opening store %s: %v", dsn, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// PostgresURL creates a database for the test and returns its URL. It skips
// the test when CRMD_TEST_POSTGRES_URL is not set.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(PostgresEnv)
	if admin == "" {
		t.Skipf("PostgreSQL tests skipped: set %s=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable to run them", PostgresEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("%s is set but PostgreSQL cannot be reached: %v", PostgresEnv, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name := "crmd_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", PostgresEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}
