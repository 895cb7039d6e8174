package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// The write path every resource write shares: the version counter, the
// change and audit rows, the row rewrite, and mutate.

// nextVersions reserves n consecutive resourceVersions and returns the
// first. It must be the first statement of a resource-writing transaction:
// on PostgreSQL the counter row's lock, held to commit, serializes every
// resource writer, so a version is never committed after a higher one and a
// subscriber resuming from N never misses a change (the same guarantee as
// taking a transaction-level advisory lock, with the counter in the same
// row). On SQLite the write transaction is already exclusive.
func nextVersions(ctx context.Context, q Querier, n int) (int64, error) {
	var last int64
	if err := q.QueryRow(ctx, `UPDATE lethe_version SET value = value + $1 WHERE id = 1 RETURNING value`, n).Scan(&last); err != nil {
		return 0, err
	}
	return last - int64(n) + 1, nil
}

// lockAndGet reserves n versions, as nextVersions does, and then loads
// the resource k with a row lock, in one round trip where the driver
// pipelines: the load starts once the counter's lock is held.
func (s *Store) lockAndGet(ctx context.Context, q Querier, n int, k catalog.Key) (int64, *catalog.Resource, error) {
	var (
		last int64
		doc  string
		got  [2]bool
	)
	err := q.QueryBatch(ctx, []Stmt{
		{SQL: `UPDATE lethe_version SET value = value + $1 WHERE id = 1 RETURNING value`, Args: []any{n}},
		{SQL: resourceByKey + s.d.ForUpdate, Args: []any{k.Kind, k.Namespace, k.Name}},
	}, func(i int, rows Rows) error {
		if !rows.Next() {
			return nil
		}
		got[i] = true
		if i == 0 {
			return rows.Scan(&last)
		}
		return rows.Scan(&doc)
	})
	switch {
	case err != nil:
		return 0, nil, err
	case !got[0]:
		return 0, nil, errors.New("catalog: the version counter row is missing")
	case !got[1]:
		return 0, nil, fmt.Errorf("%s: %w", termtext.Quote(k.String()), catalog.ErrNotFound)
	}
	cur, err := decodeResource(doc)
	return last - int64(n) + 1, cur, err
}

func changeStmt(typ catalog.EventType, version int64, r *catalog.Resource, doc string) Stmt {
	return Stmt{SQL: `INSERT INTO changes (version, type, kind, doc) VALUES ($1, $2, $3, $4)`,
		Args: []any{version, string(typ), r.Kind, doc}}
}

var (
	auditCols   = []string{"ts", "actor", "action", "kind", "namespace", "name", "uid", "from_phase", "to_phase", "reason", "details"}
	auditInsert = InsertSQL("audit", auditCols)
)

func auditStmt(e catalog.AuditEntry) Stmt {
	return Stmt{SQL: auditInsert, Args: []any{nanos(e.Time), e.Actor, e.Action, e.Kind, e.Namespace, e.Name, e.UID,
		string(e.FromPhase), string(e.ToPhase), e.Reason, string(e.Details)}}
}

// rowStmt rewrites r's row; doc is its encoding.
func rowStmt(r *catalog.Resource, doc string) Stmt {
	var due any
	if r.Phase == catalog.PhaseScheduled && r.DeletionDueAt != nil {
		due = r.DeletionDueAt.UnixNano()
	}
	return Stmt{SQL: `UPDATE resources SET phase = $2, due_at = $3, resource_version = $4, doc = $5 WHERE uid = $1`,
		Args: []any{r.UID, string(r.Phase), due, r.ResourceVersion, doc}}
}

// errNoop rolls back a mutation that turned out to change nothing.
var errNoop = errors.New("no-op")

// mutation is one resource write. apply returns the new state, or errNoop.
type mutation struct {
	key          catalog.Key
	action       string
	actor        string
	reason       string
	details      json.RawMessage
	rewriteEdges bool
	// rootDetails: the audit entry's details name the new state's
	// DeletionRoot, when it has one (Schedule, Delete).
	rootDetails bool
	// changes: the audit entry's reason, when reason is empty, names the
	// fields the write changed (Update: see changedFields).
	changes bool
	apply   func(cur *catalog.Resource, now time.Time) (*catalog.Resource, error)
	// guard, when set, may refuse the write after the row is locked,
	// reading other rows in the same transaction.
	guard func(ctx context.Context, q Querier, cur *catalog.Resource) error
	// enqueue, when set, is the queue of a work item (enqueue, the
	// resource's UID) written in the same transaction (DeleteOptions).
	enqueue string
}

// mutate runs m in a write transaction: it reserves a version, loads the
// row, applies m, and writes the row, the UPDATED change and the audit
// entry together.
func (s *Store) mutate(ctx context.Context, m mutation) (*catalog.Resource, error) {
	var out, cur *catalog.Resource
	err := s.writeTx(ctx, func(q Querier) error {
		var err error
		out, cur, err = s.mutateIn(ctx, q, m, s.b.Notify())
		return err
	})
	if errors.Is(err, errNoop) {
		return cur, nil
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	if m.enqueue != "" {
		s.wakeLocal(m.enqueue)
	}
	return out, nil
}

// mutateIn is mutate's write in the transaction q: it returns the new
// state and the one it replaced (errNoop: nothing written). tail is sent
// with its last statements.
func (s *Store) mutateIn(ctx context.Context, q Querier, m mutation, tail []Stmt) (out, cur *catalog.Resource, err error) {
	ver, c, err := s.lockAndGet(ctx, q, 1, m.key)
	if err != nil {
		return nil, nil, err
	}
	// Dated once the catalog's version lock is held, so that the
	// audit log's times follow its order (a time taken before the
	// wait for the lock could be earlier than the entry before it),
	// and the fence is checked as of the write.
	now := s.clock()
	if err := s.checkFence(ctx, q, catalog.FenceFrom(ctx), now); err != nil {
		return nil, nil, err
	}
	cur = c
	if m.guard != nil {
		if err := m.guard(ctx, q, cur); err != nil {
			return nil, cur, err
		}
	}
	next, err := m.apply(clone(cur), now)
	if err != nil {
		return nil, cur, err
	}
	next.ResourceVersion = ver
	next.UpdatedAt = now
	doc, err := encode(next)
	if err != nil {
		return nil, cur, err
	}
	ch := changeStmt(catalog.EventUpdated, ver, next, doc)
	stmts := []Stmt{rowStmt(next, doc)}
	if m.rewriteEdges {
		stmts = append(stmts,
			Stmt{SQL: `DELETE FROM owner_edges WHERE dependent_uid = $1`, Args: []any{next.UID}},
			Stmt{SQL: `DELETE FROM reference_edges WHERE referrer_uid = $1`, Args: []any{next.UID}})
		stmts = append(stmts, edgeStmts(next)...)
	}
	details := m.details
	if m.rootDetails && next.DeletionRoot != nil && len(details) == 0 {
		if details, err = rootDetails(next.DeletionRoot); err != nil {
			return nil, cur, err
		}
	}
	reason := m.reason
	if m.changes && reason == "" {
		reason = "changed: " + changedFields(cur, next)
	}
	stmts = append(stmts, ch, auditStmt(catalog.AuditEntry{Time: now, Actor: m.actor, Action: m.action,
		Kind: next.Kind, Namespace: next.Namespace, Name: next.Name, UID: next.UID,
		FromPhase: cur.Phase, ToPhase: next.Phase, Reason: reason, Details: details}))
	if m.rewriteEdges && grewEdges(cur, next) {
		// A new edge: the cycle check reads the rows just written.
		if err := q.ExecBatch(ctx, stmts); err != nil {
			return nil, cur, err
		}
		if err := s.checkCycles(ctx, q, []*catalog.Resource{next}); err != nil {
			return nil, cur, err
		}
		stmts = nil
	}
	if m.enqueue != "" {
		stmts = append(stmts, workStmt(catalog.WorkItem{Queue: m.enqueue, Key: next.UID}, now))
	}
	if err := q.ExecBatch(ctx, append(stmts, tail...)); err != nil {
		return nil, cur, err
	}
	if m.enqueue != "" {
		if err := s.b.NotifyWake(ctx, q, m.enqueue); err != nil {
			return nil, cur, err
		}
	}
	return next, cur, nil
}

// rootDetails is the details of an audit entry naming a cascade's root:
// {"deletionRoot": {"kind", "namespace", "name", "uid"}}.
func rootDetails(root *catalog.ObjectRef) (json.RawMessage, error) {
	b, err := json.Marshal(struct {
		Root *catalog.ObjectRef `json:"deletionRoot"`
	}{root})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", catalog.ErrInvalid, err)
	}
	return b, nil
}
