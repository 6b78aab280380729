package cli

import (
	"context"
	"flag"
	"log/slog"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions" // the built-in actions
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/postgres"
	"github.com/crmd/crmd/objects/sqlite"
)

// defaultDB is the SQLite file crmd uses when told nothing else.
const defaultDB = "./crmd.db"

// dbFlag adds --db to a command.
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", envOr("CRMD_DB", defaultDB), "SQLite file path or postgres:// URL (env CRMD_DB)")
}

// openStore opens the store dsn names: PostgreSQL for a postgres:// or
// postgresql:// URL, and otherwise a SQLite file.
func openStore(ctx context.Context, dsn string, log *slog.Logger) (objects.Store, error) {
	if postgres.IsURL(dsn) {
		return postgres.Open(ctx, dsn, log)
	}
	return sqlite.Open(ctx, dsn, log)
}

// openEngine opens the store and an engine over it for an operator command.
func openEngine(ctx context.Context, c *cli, dsn string) (*engine.Engine, func(), error) {
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	st, err := openStore(ctx, dsn, log)
	if err != nil {
		return nil, nil, err
	}
	return engine.New(st, engine.Options{Logger: log}), func() { st.Close() }, nil
}
