// Package drivers opens a catalog.Store by URL. It is the only package
// that imports both drivers; engines depend on catalog.Store alone.
package drivers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
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
		return nil, fmt.Errorf("catalog store %q: want sqlite:///path/to.db or postgres://…", catalog.RedactURL(rawURL))
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
		if !schemeRE.MatchString(scheme) {
			// Not a URL (a keyword/value string, say): the part before the
			// colon may hold a password.
			return nil, fmt.Errorf("catalog store %q: want sqlite:///path/to.db or postgres://…", catalog.RedactURL(rawURL))
		}
		return nil, fmt.Errorf("catalog store %q: unknown scheme %q (want sqlite or postgres)", catalog.RedactURL(rawURL), scheme)
	}
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// SQLitePath returns the file path of a sqlite: URL.
func SQLitePath(rawURL string) (string, error) {
	shown := catalog.RedactURL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the raw URL.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("catalog store %q: %v", shown, err)
	}
	switch {
	case u.Opaque != "": // sqlite:relative/path.db
		return u.Opaque, nil
	case u.Host != "":
		return "", fmt.Errorf("catalog store %q: a sqlite URL takes an absolute path after three slashes (sqlite:///var/lib/lethe.db) or a relative one after the colon (sqlite:lethe.db)", shown)
	case u.Path == "" || u.Path == "/":
		return "", fmt.Errorf("catalog store %q: no database path", shown)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("catalog store %q: a sqlite URL takes no query or fragment", shown)
	}
	return u.Path, nil
}
