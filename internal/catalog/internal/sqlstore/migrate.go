package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
)

// Migration is one versioned schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads files named NNN_name.sql from dir of fsys, in order.
// Versions must be 1, 2, 3… without gaps.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: want NNN_name.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must be 1..n without gaps; found %d at position %d", m.Version, i+1)
		}
	}
	return ms, nil
}

// MigrationsTable records applied schema versions.
const MigrationsTable = "lethe_migrations"

// Migrate applies pending migrations in one transaction. A database whose
// schema version is newer than the newest migration refuses with
// catalog.ErrSchemaTooNew.
//
// A schema that is already current is only read: no DDL, no lock. A role
// that may not change the schema (the PostgreSQL runtime role of
// docs/postgres.md) can therefore open a catalog that the owner role
// migrated.
func Migrate(ctx context.Context, b Backend, ms []Migration, now int64) (applied int, err error) {
	var cur int64
	err = b.WriteTx(ctx, func(q Querier) error {
		return q.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+MigrationsTable).Scan(&cur)
	})
	switch {
	case err != nil:
		// No migrations table yet (a new database), or it cannot be read:
		// the locked path below creates it or reports the error.
	case cur > int64(len(ms)):
		return 0, tooNew(cur, len(ms))
	case cur == int64(len(ms)):
		return 0, nil
	}
	d := b.Dialect()
	err = b.WriteTx(ctx, func(q Querier) error {
		if d.MigrationLock != "" {
			if _, err := q.Exec(ctx, d.MigrationLock); err != nil {
				return err
			}
		}
		if _, err := q.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+MigrationsTable+` (
			version BIGINT PRIMARY KEY,
			name TEXT NOT NULL,
			applied_at BIGINT NOT NULL)`); err != nil {
			return err
		}
		if err := q.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+MigrationsTable).Scan(&cur); err != nil {
			return err
		}
		if cur > int64(len(ms)) {
			return tooNew(cur, len(ms))
		}
		for _, m := range ms[cur:] {
			if _, err := q.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := q.Exec(ctx, `INSERT INTO `+MigrationsTable+` (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.Version, m.Name, now); err != nil {
				return err
			}
			applied++
		}
		return nil
	})
	return applied, err
}

func tooNew(cur int64, known int) error {
	return fmt.Errorf("%w: the database is at schema version %d but this binary knows only up to %d; upgrade Lethe (or point it at another database)",
		catalog.ErrSchemaTooNew, cur, known)
}
