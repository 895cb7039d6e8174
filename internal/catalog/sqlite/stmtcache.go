package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"

	"modernc.org/sqlite"
)

// stmtCacheMax bounds the prepared statements one connection keeps. When
// it is reached the idle ones are finalized and the cache starts over: the
// statements run often come back at once, and the rare ones (an IN list of
// a new length) cannot crowd them out for long.
const stmtCacheMax = 128

// openConnector returns a connector whose connections keep their prepared
// statements. modernc's driver compiles the SQL of every ExecContext and
// QueryContext anew; for the catalog's small transactions (a resource's
// finalizer removed, a lease released) that compilation was about a
// quarter of the CPU (profiled: the gc cascade with one plugin).
func openConnector(dsn string) (driver.Connector, error) {
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return cachingConnector{base}, nil
}

type cachingConnector struct{ base driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	dc, ok := conn.(driverConn)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("catalog: sqlite: the driver's connection lacks a context interface")
	}
	return &cachingConn{driverConn: dc, stmts: map[string]*cachedStmt{}}, nil
}

func (c cachingConnector) Driver() driver.Driver { return c.base.Driver() }

// driverConn is what modernc's connection implements and database/sql uses.
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn runs single statements through prepared statements it keeps
// by SQL text. database/sql never uses a connection from two goroutines at
// once, so it needs no lock. A statement still reading rows when its SQL
// runs again (a query inside a loop over its own results) is not shared:
// the second run prepares a statement of its own.
type cachingConn struct {
	driverConn
	stmts    map[string]*cachedStmt
	prepares int // statements prepared (for tests)
}

type cachedStmt struct {
	s    stmt
	busy bool
}

type stmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// get returns a statement for query and the function that gives it back.
// A nil statement means: run it the driver's own way (a script of several
// statements, which modernc runs one by one).
func (c *cachingConn) get(ctx context.Context, query string) (stmt, func(), error) {
	if strings.Contains(query, ";") {
		return nil, nil, nil
	}
	if cs, ok := c.stmts[query]; ok && !cs.busy {
		cs.busy = true
		return cs.s, func() { cs.busy = false }, nil
	}
	ds, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	c.prepares++
	s, ok := ds.(stmt)
	if !ok {
		_ = ds.Close()
		return nil, nil, nil
	}
	if _, shared := c.stmts[query]; shared {
		return s, func() { _ = s.Close() }, nil // the cached one is busy
	}
	if len(c.stmts) >= stmtCacheMax {
		for q, cs := range c.stmts {
			if !cs.busy {
				_ = cs.s.Close()
				delete(c.stmts, q)
			}
		}
	}
	cs := &cachedStmt{s: s, busy: true}
	c.stmts[query] = cs
	return s, func() { cs.busy = false }, nil
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, release, err := c.get(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.driverConn.ExecContext(ctx, query, args)
	}
	defer release()
	return s.ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s, release, err := c.get(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.driverConn.QueryContext(ctx, query, args)
	}
	rows, err := s.QueryContext(ctx, args)
	if err != nil {
		release()
		return nil, err
	}
	return &cachedRows{Rows: rows, release: release}, nil
}

// Close finalizes the kept statements, then closes the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for q, cs := range c.stmts {
		errs = append(errs, cs.s.Close())
		delete(c.stmts, q)
	}
	errs = append(errs, c.driverConn.Close())
	return errors.Join(errs...)
}

// cachedRows gives its statement back when closed.
type cachedRows struct {
	driver.Rows
	release func()
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	if r.release != nil {
		r.release()
		r.release = nil
	}
	return err
}
