// Package drivers opens a catalog.Store by URL. It is the only package
// that imports both drivers; engines depend on catalog.Store alone.
package drivers

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/postgres"
	"github.com/lethehq/lethe/internal/catalog/sqlite"
)

// Open opens the catalog at rawURL, choosing the driver by scheme:
//
//   - sqlite:///abs/path/to.db — an absolute path (three slashes);
//   - sqlite:relative/path.db — a path relative to the working directory;
//   - postgres://… or postgresql://… — a PostgreSQL connection URL, as pgx
//     accepts it.
//
// cfg may be nil (defaults). Pending migrations are applied on open.
func Open(ctx context.Context, rawURL string, cfg *catalog.Config) (catalog.Store, error) {
	scheme, _, ok := strings.Cut(rawURL, ":")
	if !ok || rawURL == "" {
		return nil, fmt.Errorf("catalog store %q: want sqlite:///path/to.db or postgres://…", rawURL)
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		path, err := SQLitePath(rawURL)
		if err != nil {
			return nil, err
		}
		return sqlite.Open(ctx, path, cfg)
	case "postgres", "postgresql":
		return postgres.Open(ctx, rawURL, cfg)
	default:
		return nil, fmt.Errorf("catalog store %q: unknown scheme %q (want sqlite or postgres)", redact(rawURL), scheme)
	}
}

// SQLitePath returns the file path of a sqlite: URL.
func SQLitePath(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("catalog store %q: %v", rawURL, err)
	}
	switch {
	case u.Opaque != "": // sqlite:relative/path.db
		return u.Opaque, nil
	case u.Host != "":
		return "", fmt.Errorf("catalog store %q: a sqlite URL takes an absolute path after three slashes (sqlite:///var/lib/lethe.db) or a relative one after the colon (sqlite:lethe.db)", rawURL)
	case u.Path == "" || u.Path == "/":
		return "", fmt.Errorf("catalog store %q: no database path", rawURL)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("catalog store %q: a sqlite URL takes no query or fragment", rawURL)
	}
	return u.Path, nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
