package objects

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// A Migration is one versioned step of a store's database schema.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads the migrations in fsys, files named NNNN_name.sql,
// in version order. Stores embed their migrations and apply the ones a
// database has not seen at start-up.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	paths, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, p := range paths {
		num, _, ok := strings.Cut(p, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number and an underscore", p)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(p, ".sql"), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s have the same version", ms[i-1].Name, ms[i].Name)
		}
	}
	return ms, nil
}

// Pending returns the migrations of ms that a database at version current
// has not applied, in order, or a *SchemaTooNewError when the database is
// ahead of ms.
func Pending(ms []Migration, current int) ([]Migration, error) {
	if len(ms) > 0 && current > ms[len(ms)-1].Version {
		return nil, &SchemaTooNewError{Database: current, Binary: ms[len(ms)-1].Version}
	}
	var out []Migration
	for _, m := range ms {
		if m.Version > current {
			out = append(out, m)
		}
	}
	return out, nil
}

// SchemaTooNewError means the database was migrated by a newer crmd.
type SchemaTooNewError struct{ Database, Binary int }

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the database schema is at version %d, newer than this crmd knows (%d); run a crmd at least as new as the one that migrated it", e.Database, e.Binary)
}
