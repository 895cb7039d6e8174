package catalog

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults for Config.
const (
	PollIntervalDefault = 100 * time.Millisecond
	BusyTimeoutDefault  = 10 * time.Second
	MaxConnsDefault     = 8
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
	// BusyTimeout is how long SQLite waits for another process's write
	// lock. Default 10s.
	BusyTimeout time.Duration
	// MaxConns caps the read pool (SQLite; the writer is always one
	// connection) or the pgxpool (PostgreSQL). Default 8.
	MaxConns int
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
	return &out
}

// Validate checks a Config after WithDefaults.
func (c *Config) Validate() error {
	switch {
	case c.PollInterval < 0:
		return errors.New("catalog config: PollInterval must not be negative")
	case c.BusyTimeout < 0:
		return errors.New("catalog config: BusyTimeout must not be negative")
	case c.MaxConns < 1:
		return errors.New("catalog config: MaxConns must be at least 1")
	}
	return nil
}

type actorKey struct{}

// WithActor records who is acting, for the audit entries of Create and
// Update (the lifecycle methods take an actor argument instead).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor set by WithActor, or "unknown".
func ActorFrom(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return "unknown"
}
