package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults for Config.
const (
	PollIntervalDefault = 100 * time.Millisecond
	BusyTimeoutDefault  = 10 * time.Second
	MaxConnsDefault     = 8
	// SQLiteCacheKiBDefault is 64 MiB.
	SQLiteCacheKiBDefault = 64 << 10
)

// Config configures a driver (see drivers.Open). A nil *Config and zero
// fields take defaults. No driver reads a global clock: every time the
// catalog stores or compares comes from Now, and SQL takes it as a parameter.
type Config struct {
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives driver logs. Default a null logger.
	Logger hclog.Logger
	// PollInterval is how often a Watch polls the change table on SQLite
	// (in-process writes wake it at once). A PostgreSQL Watch is woken by
	// NOTIFY, and re-reads the change table every 10×PollInterval as a
	// safety net. Default 100ms.
	PollInterval time.Duration
	// FileWake (SQLite) also wakes a Watch when the database file or its
	// write-ahead log changes on disk (inotify, kqueue): another process's
	// commit then reaches this process's subscribers at once, and their
	// poll becomes a safety net every 10×PollInterval, as on PostgreSQL.
	// It is for a process that waits on other processes' writes for long
	// (lethe get -w, lethe status), not for one that writes much itself:
	// its own commits would wake it twice. Where the file cannot be
	// watched, the poll stays every PollInterval. Ignored by PostgreSQL.
	FileWake bool
	// BusyTimeout is how long SQLite waits for another process's write
	// lock. Default 10s.
	BusyTimeout time.Duration
	// MaxConns caps the read pool (SQLite; the writer is always one
	// connection) or the pgxpool (PostgreSQL). Default 8.
	MaxConns int
	// SQLiteCacheKiB is the SQLite writer connection's page cache, in KiB
	// (default 65536: 64 MiB for a long-running server). A command that
	// runs once and writes one large transaction (apply) sets it lower:
	// the pages beyond it spill to the write-ahead log before the commit
	// instead of staying in memory. Ignored by PostgreSQL.
	SQLiteCacheKiB int
	// Schema is the PostgreSQL schema (search_path) the catalog lives in.
	// It is created if missing. Empty: the server's default search_path.
	// Ignored by SQLite.
	Schema string
}

// WithDefaults returns a copy of c (which may be nil) with defaults filled.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = hclog.NewNullLogger()
	}
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.BusyTimeout = cmp.Or(out.BusyTimeout, BusyTimeoutDefault)
	out.MaxConns = cmp.Or(out.MaxConns, MaxConnsDefault)
	out.SQLiteCacheKiB = cmp.Or(out.SQLiteCacheKiB, SQLiteCacheKiBDefault)
	return &out
}

// Validate checks a Config after WithDefaults.
func (c *Config) Validate() error {
	switch {
	case c.PollInterval < 0:
		return errors.New("catalog config: PollInterval must not be negative")
	case c.BusyTimeout < 0:
		return errors.New("catalog config: BusyTimeout must not be negative")
	case c.SQLiteCacheKiB < 0:
		return errors.New("catalog config: SQLiteCacheKiB must not be negative")
	case c.MaxConns < 1 || c.MaxConns > math.MaxInt32:
		return errors.New("catalog config: MaxConns must be at least 1 and fit in 32 bits")
	}
	return nil
}

type actorKey struct{}

// WithActor records who is acting. The context is the only way the actor
// travels: every write of the Store (Create, Update and each lifecycle
// method) audits, and a purge's tombstone records, ActorFrom(ctx).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// WithDefaultActor is ctx if it already names an actor, else
// WithActor(ctx, actor).
func WithDefaultActor(ctx context.Context, actor string) context.Context {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return ctx
	}
	return WithActor(ctx, actor)
}

// ActorFrom returns the actor set by WithActor, or "unknown". Under a
// leader fence (WithLeaderFence) it names the term as well, e.g.
// "ttl (leader term 7)": the audit log then says which term of the
// leadership made each write of the leader's loops.
func ActorFrom(ctx context.Context) string {
	a, ok := ctx.Value(actorKey{}).(string)
	if !ok || a == "" {
		a = "unknown"
	}
	if f := LeaderFenceFrom(ctx); f != nil {
		if suffix := fmt.Sprintf(" (leader term %d)", f.Term); !strings.HasSuffix(a, suffix) {
			a += suffix
		}
	}
	return a
}

// redacted replaces a secret in a displayed address.
const redacted = "xxxxx"

// RedactURL returns a catalog address fit to display in a banner, an error
// or a log: the one function every caller uses to show a store address.
//
//   - postgres://user:pass@host/db: the password becomes xxxxx;
//   - any query parameter whose name contains "password", in any case
//     (password, sslpassword, PassWord): its value becomes xxxxx;
//   - a keyword/value connection string (host=db password='s e c'): the
//     values of keys that contain "password" become xxxxx;
//   - an address it cannot parse is reduced to its scheme, since the
//     password could be anywhere in it.
//
// A sqlite: URL carries no secret and is returned as it is.
func RedactURL(raw string) string {
	s := strings.TrimSpace(raw)
	if s == "" {
		return ""
	}
	if keywordStyle.MatchString(s) {
		return redactKeywords(s)
	}
	u, err := url.Parse(s)
	if err != nil {
		scheme, _, ok := strings.Cut(s, ":")
		if !ok || strings.ContainsAny(scheme, "@/?#= ") {
			return "(address hidden: it does not parse)"
		}
		return scheme + ":(rest hidden: it does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if at := strings.LastIndex(u.Opaque, "@"); at >= 0 {
		// user:pass@host/db without "//" parses as scheme "user".
		return redacted + u.Opaque[at:]
	}
	u.RawQuery = redactQuery(u.RawQuery, func(key string) bool {
		return strings.Contains(strings.ToLower(key), "password")
	})
	return u.String()
}

// keywordStyle matches the start of a keyword/value connection string.
var keywordStyle = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*[ \t]*=`)

// redactQuery replaces the values of the parameters of a raw query for
// which secret says so, keeping the order and encoding of the rest.
func redactQuery(raw string, secret func(key string) bool) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, hasValue := strings.Cut(p, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k
		}
		if hasValue && secret(key) {
			parts[i] = k + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// redactKeywords redacts a keyword/value connection string
// (host=db user=lethe password='se cret'), as libpq and pgx read it:
// values are bare words or single-quoted with backslash escapes.
func redactKeywords(s string) string {
	var out strings.Builder
	i := 0
	for i < len(s) {
		if s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' {
			out.WriteByte(s[i])
			i++
			continue
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		key := s[start:i]
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			return "(connection string hidden: it does not parse)"
		}
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return "(connection string hidden: it does not parse)"
			}
			i++
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		}
		value := s[vstart:min(i, len(s))]
		if strings.Contains(strings.ToLower(key), "password") {
			value = redacted
		}
		out.WriteString(key + "=" + value)
	}
	return out.String()
}
