package sqlstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lethehq/lethe/internal/catalog"
)

// Store implements catalog.Store on a Backend.
type Store struct {
	b      Backend
	d      Dialect
	now    func() time.Time
	logger hclog.Logger
	poll   time.Duration

	// closing ends every subscription when the store closes.
	closing   context.Context
	closeAll  context.CancelCauseFunc
	subs      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var _ catalog.Store = (*Store)(nil)

// New returns a Store. cfg must have defaults filled.
func New(b Backend, cfg *catalog.Config) *Store {
	closing, closeAll := context.WithCancelCause(context.Background())
	return &Store{b: b, d: b.Dialect(), now: cfg.Now, logger: cfg.Logger, poll: cfg.PollInterval,
		closing: closing, closeAll: closeAll}
}

// Close ends every subscription (their Err is catalog.ErrClosed), waits
// for them, and closes the backend. Closing twice is a no-op.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeAll(catalog.ErrClosed)
		s.subs.Wait()
		s.closeErr = s.b.Close()
	})
	return s.closeErr
}

func (s *Store) clock() time.Time { return s.now().UTC() }

func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	return s.b.MapError(err)
}

const (
	listLimitDefault = 500
	listLimitMax     = 5000
)

// --- encoding ---

func encode(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", catalog.ErrInvalid, err)
	}
	return string(b), nil
}

func decodeResource(doc string) (*catalog.Resource, error) {
	var r catalog.Resource
	if err := json.Unmarshal([]byte(doc), &r); err != nil {
		return nil, fmt.Errorf("catalog: corrupt resource document: %w", err)
	}
	return &r, nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func clone(r *catalog.Resource) *catalog.Resource {
	c := *r
	c.Labels = maps.Clone(r.Labels)
	c.Annotations = maps.Clone(r.Annotations)
	c.Owners = slices.Clone(r.Owners)
	c.References = slices.Clone(r.References)
	c.Finalizers = slices.Clone(r.Finalizers)
	c.Conditions = slices.Clone(r.Conditions)
	c.Spec = slices.Clone(r.Spec)
	c.Status = slices.Clone(r.Status)
	return &c
}

func validateResource(r *catalog.Resource) error {
	if r == nil {
		return fmt.Errorf("%w: nil resource", catalog.ErrInvalid)
	}
	if r.Kind == "" || r.Name == "" {
		return fmt.Errorf("%w: resource needs a kind and a name (got %q)", catalog.ErrInvalid, r.Key())
	}
	for _, raw := range []json.RawMessage{r.Spec, r.Status} {
		if len(raw) > 0 && !json.Valid(raw) {
			return fmt.Errorf("%w: %s: spec or status is not valid JSON", catalog.ErrInvalid, r.Key())
		}
	}
	for _, ref := range r.References {
		switch ref.OnTargetDelete {
		case catalog.RefBlock, catalog.RefUnset, catalog.RefCascade, catalog.RefAllowDangling:
		default:
			return fmt.Errorf("%w: %s: reference to %s/%s has onTargetDelete %q (want block, unset, cascade or allowDangling)",
				catalog.ErrInvalid, r.Key(), ref.Kind, ref.Name, ref.OnTargetDelete)
		}
	}
	for _, o := range r.Owners {
		if o.UID == "" {
			return fmt.Errorf("%w: %s: owner reference without a uid", catalog.ErrInvalid, r.Key())
		}
	}
	return nil
}

// --- version counter, change feed, audit ---

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

func edgeStmts(r *catalog.Resource) []Stmt {
	var out []Stmt
	for _, o := range r.Owners {
		out = append(out, Stmt{SQL: `INSERT INTO owner_edges (owner_uid, dependent_uid, block_owner_deletion) VALUES ($1, $2, $3)
ON CONFLICT (owner_uid, dependent_uid) DO UPDATE SET block_owner_deletion = excluded.block_owner_deletion`,
			Args: []any{o.UID, r.UID, o.BlockOwnerDeletion}})
	}
	for _, ref := range r.References {
		out = append(out, Stmt{SQL: `INSERT INTO reference_edges (target_kind, target_namespace, target_name, referrer_uid, on_target_delete)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (target_kind, target_namespace, target_name, referrer_uid) DO UPDATE SET on_target_delete = excluded.on_target_delete`,
			Args: []any{ref.Kind, ref.Namespace, ref.Name, r.UID, string(ref.OnTargetDelete)}})
	}
	return out
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

// --- CRUD ---

// Create implements catalog.Store.
func (s *Store) Create(ctx context.Context, r *catalog.Resource) (*catalog.Resource, error) {
	out, err := s.CreateBatch(ctx, []*catalog.Resource{r})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// CreateBatch implements catalog.Store.
func (s *Store) CreateBatch(ctx context.Context, rs []*catalog.Resource) ([]*catalog.Resource, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	now := s.clock()
	actor := catalog.ActorFrom(ctx)
	out := make([]*catalog.Resource, len(rs))
	seen := make(map[catalog.Key]bool, len(rs))
	for i, in := range rs {
		if err := validateResource(in); err != nil {
			return nil, err
		}
		if seen[in.Key()] {
			return nil, fmt.Errorf("%w: %s appears twice in the batch", catalog.ErrAlreadyExists, in.Key())
		}
		seen[in.Key()] = true
		r := clone(in)
		if r.UID == "" {
			// Time-ordered (v7) UIDs keep the uid indexes' inserts at
			// their right edge: random v4 UIDs made a 1M-row load
			// several times slower once the indexes outgrew the cache.
			id, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			r.UID = id.String()
		}
		r.Phase = catalog.PhaseActive
		r.DeletionDueAt, r.DeletionTimestamp, r.PropagationPolicy = nil, nil, ""
		r.CreatedAt, r.UpdatedAt = now, now
		out[i] = r
	}
	var (
		resRows, ownerRows, refRows, changeRows, auditRows [][]any
	)
	err := s.b.WriteTx(ctx, func(q Querier) error {
		first, err := nextVersions(ctx, q, len(out))
		if err != nil {
			return err
		}
		resRows, ownerRows, refRows = resRows[:0], ownerRows[:0], refRows[:0]
		changeRows, auditRows = changeRows[:0], auditRows[:0]
		for i, r := range out {
			r.ResourceVersion = first + int64(i)
			doc, err := encode(r)
			if err != nil {
				return err
			}
			resRows = append(resRows, []any{r.UID, r.Kind, r.Namespace, r.Name, string(r.Phase), nil, r.ResourceVersion, doc})
			seenOwner := map[string]bool{}
			for _, o := range r.Owners {
				if !seenOwner[o.UID] {
					seenOwner[o.UID] = true
					ownerRows = append(ownerRows, []any{o.UID, r.UID, o.BlockOwnerDeletion})
				}
			}
			seenRef := map[catalog.Key]bool{}
			for _, ref := range r.References {
				k := catalog.Key{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
				if !seenRef[k] {
					seenRef[k] = true
					refRows = append(refRows, []any{ref.Kind, ref.Namespace, ref.Name, r.UID, string(ref.OnTargetDelete)})
				}
			}
			changeRows = append(changeRows, []any{r.ResourceVersion, string(catalog.EventAdded), r.Kind, doc})
			auditRows = append(auditRows, auditStmt(catalog.AuditEntry{Time: now, Actor: actor, Action: "create",
				Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID, ToPhase: catalog.PhaseActive}).Args)
		}
		for _, ins := range []struct {
			table string
			cols  []string
			rows  [][]any
		}{
			{"resources", []string{"uid", "kind", "namespace", "name", "phase", "due_at", "resource_version", "doc"}, resRows},
			{"owner_edges", []string{"owner_uid", "dependent_uid", "block_owner_deletion"}, ownerRows},
			{"reference_edges", []string{"target_kind", "target_namespace", "target_name", "referrer_uid", "on_target_delete"}, refRows},
			{"changes", []string{"version", "type", "kind", "doc"}, changeRows},
			{"audit", auditCols, auditRows},
		} {
			if len(ins.rows) > 0 {
				if err := q.InsertRows(ctx, ins.table, ins.cols, ins.rows); err != nil {
					return err
				}
			}
		}
		return s.b.Notify(ctx, q, first+int64(len(out))-1)
	})
	if err != nil {
		err = s.mapErr(err)
		if errors.Is(err, catalog.ErrAlreadyExists) && len(out) == 1 {
			return nil, fmt.Errorf("%s: %w", out[0].Key(), catalog.ErrAlreadyExists)
		}
		return nil, err
	}
	return out, nil
}

const resourceByKey = `SELECT doc FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3`

func (s *Store) getOne(ctx context.Context, q Querier, what string, sql string, args ...any) (*catalog.Resource, error) {
	var doc string
	if err := q.QueryRow(ctx, sql, args...).Scan(&doc); err != nil {
		if errors.Is(err, ErrNoRows) {
			return nil, fmt.Errorf("%s: %w", what, catalog.ErrNotFound)
		}
		return nil, s.mapErr(err)
	}
	return decodeResource(doc)
}

// Get implements catalog.Store.
func (s *Store) Get(ctx context.Context, k catalog.Key) (*catalog.Resource, error) {
	return s.getOne(ctx, s.b.Reader(), k.String(), resourceByKey, k.Kind, k.Namespace, k.Name)
}

// GetByUID implements catalog.Store.
func (s *Store) GetByUID(ctx context.Context, uid string) (*catalog.Resource, error) {
	return s.getOne(ctx, s.b.Reader(), "uid "+uid, `SELECT doc FROM resources WHERE uid = $1`, uid)
}

type continueToken struct {
	Kind      string `json:"k"`
	Namespace string `json:"ns"`
	Name      string `json:"n"`
}

// List implements catalog.Store. Items are ordered by kind, namespace and
// name. Kind, namespace and phase are filtered in SQL (indexed); the label
// selector is applied in Go. The continue token is opaque (it encodes the
// last key returned).
func (s *Store) List(ctx context.Context, opts catalog.ListOptions) (*catalog.ListResult, error) {
	sel := labels.Everything()
	if opts.LabelSelector != "" {
		var err error
		if sel, err = labels.Parse(opts.LabelSelector); err != nil {
			return nil, fmt.Errorf("%w: label selector %q: %v", catalog.ErrInvalid, opts.LabelSelector, err)
		}
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = listLimitDefault
	}
	limit = min(limit, listLimitMax)
	var after *continueToken
	if opts.Continue != "" {
		b, err := base64.RawURLEncoding.DecodeString(opts.Continue)
		after = new(continueToken)
		if err == nil {
			err = json.Unmarshal(b, after)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: bad continue token", catalog.ErrInvalid)
		}
	}
	var where []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", fmt.Sprintf("$%d", len(args)), 1)
		}
		where = append(where, cond)
	}
	if opts.Kind != "" {
		add("kind = ?", opts.Kind)
	}
	if opts.Namespace != "" {
		add("namespace = ?", opts.Namespace)
	}
	if opts.Phase != "" {
		add("phase = ?", string(opts.Phase))
	}
	base := len(args)
	chunk := limit + 1
	if !sel.Empty() {
		chunk = max(chunk, 256)
	}
	res := &catalog.ListResult{}
	for {
		w := slices.Clone(where)
		a := slices.Clone(args[:base])
		if after != nil {
			a = append(a, after.Kind, after.Namespace, after.Name)
			n := len(a)
			w = append(w, fmt.Sprintf("(kind > $%d OR (kind = $%d AND (namespace > $%d OR (namespace = $%d AND name > $%d))))",
				n-2, n-2, n-1, n-1, n))
		}
		sql := `SELECT doc FROM resources`
		if len(w) > 0 {
			sql += ` WHERE ` + strings.Join(w, " AND ")
		}
		a = append(a, chunk)
		sql += fmt.Sprintf(` ORDER BY kind, namespace, name LIMIT $%d`, len(a))
		batch, err := s.queryResources(ctx, s.b.Reader(), sql, a...)
		if err != nil {
			return nil, err
		}
		for _, r := range batch {
			after = &continueToken{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
			if !sel.Matches(labels.Set(r.Labels)) {
				continue
			}
			if len(res.Items) == limit {
				// There is at least one more match: the page ends at the
				// last item returned.
				last := res.Items[limit-1]
				b, _ := json.Marshal(continueToken{Kind: last.Kind, Namespace: last.Namespace, Name: last.Name})
				res.Continue = base64.RawURLEncoding.EncodeToString(b)
				return res, nil
			}
			res.Items = append(res.Items, r)
		}
		if len(batch) < chunk {
			return res, nil
		}
	}
}

func (s *Store) queryResources(ctx context.Context, q Querier, sql string, args ...any) ([]*catalog.Resource, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.mapErr(err)
	}
	var docs []string
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			rows.Close()
			return nil, s.mapErr(err)
		}
		docs = append(docs, doc)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.mapErr(err)
	}
	return decodeResources(docs)
}

// decodeResources decodes documents, in parallel for large results (JSON
// decoding is most of the cost of a 10k-dependent lookup).
func decodeResources(docs []string) ([]*catalog.Resource, error) {
	out := make([]*catalog.Resource, len(docs))
	workers := min(runtime.GOMAXPROCS(0), len(docs)/parallelDecodeMin)
	if workers <= 1 {
		for i, d := range docs {
			r, err := decodeResource(d)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	var (
		wg   sync.WaitGroup
		errs = make([]error, workers)
	)
	chunk := (len(docs) + workers - 1) / workers
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, len(docs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				r, err := decodeResource(docs[i])
				if err != nil {
					errs[w] = err
					return
				}
				out[i] = r
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

const parallelDecodeMin = 512

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
	apply        func(cur *catalog.Resource, now time.Time) (*catalog.Resource, error)
}

// mutate runs m in a write transaction: it reserves a version, loads the
// row, applies m, and writes the row, the UPDATED change and the audit
// entry together.
func (s *Store) mutate(ctx context.Context, m mutation) (*catalog.Resource, error) {
	now := s.clock()
	var out, cur *catalog.Resource
	err := s.b.WriteTx(ctx, func(q Querier) error {
		ver, err := nextVersions(ctx, q, 1)
		if err != nil {
			return err
		}
		cur, err = s.getOne(ctx, q, m.key.String(), resourceByKey+s.d.ForUpdate, m.key.Kind, m.key.Namespace, m.key.Name)
		if err != nil {
			return err
		}
		next, err := m.apply(clone(cur), now)
		if err != nil {
			return err
		}
		next.ResourceVersion = ver
		next.UpdatedAt = now
		doc, err := encode(next)
		if err != nil {
			return err
		}
		ch := changeStmt(catalog.EventUpdated, ver, next, doc)
		stmts := []Stmt{rowStmt(next, doc)}
		if m.rewriteEdges {
			stmts = append(stmts,
				Stmt{SQL: `DELETE FROM owner_edges WHERE dependent_uid = $1`, Args: []any{next.UID}},
				Stmt{SQL: `DELETE FROM reference_edges WHERE referrer_uid = $1`, Args: []any{next.UID}})
			stmts = append(stmts, edgeStmts(next)...)
		}
		stmts = append(stmts, ch, auditStmt(catalog.AuditEntry{Time: now, Actor: m.actor, Action: m.action,
			Kind: next.Kind, Namespace: next.Namespace, Name: next.Name, UID: next.UID,
			FromPhase: cur.Phase, ToPhase: next.Phase, Reason: m.reason, Details: m.details}))
		if err := q.ExecBatch(ctx, stmts); err != nil {
			return err
		}
		out = next
		return s.b.Notify(ctx, q, ver)
	})
	if errors.Is(err, errNoop) {
		return cur, nil
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	return out, nil
}

// Update implements catalog.Store.
func (s *Store) Update(ctx context.Context, r *catalog.Resource) (*catalog.Resource, error) {
	if err := validateResource(r); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{key: r.Key(), action: "update", actor: catalog.ActorFrom(ctx), rewriteEdges: true,
		apply: func(cur *catalog.Resource, _ time.Time) (*catalog.Resource, error) {
			if r.UID != "" && r.UID != cur.UID {
				return nil, fmt.Errorf("%s: uid %s does not match the stored %s: %w", r.Key(), r.UID, cur.UID, catalog.ErrConflict)
			}
			if r.ResourceVersion != cur.ResourceVersion {
				return nil, fmt.Errorf("%s: resourceVersion %d, stored %d: %w", r.Key(), r.ResourceVersion, cur.ResourceVersion, catalog.ErrConflict)
			}
			if cur.Phase == catalog.PhaseDeleting {
				for _, f := range r.Finalizers {
					if !slices.Contains(cur.Finalizers, f) {
						return nil, &catalog.TransitionError{Key: cur.Key(), From: cur.Phase, To: cur.Phase,
							Reason: fmt.Sprintf("cannot add finalizer %q to a Deleting resource", f)}
					}
				}
			}
			next := clone(r)
			next.UID = cur.UID
			next.Phase = cur.Phase
			next.DeletionDueAt = cur.DeletionDueAt
			next.DeletionTimestamp = cur.DeletionTimestamp
			next.PropagationPolicy = cur.PropagationPolicy
			next.CreatedAt = cur.CreatedAt
			return next, nil
		}})
}

// --- lifecycle ---

func transitionErr(cur *catalog.Resource, to catalog.Phase, reason string) error {
	return &catalog.TransitionError{Key: cur.Key(), From: cur.Phase, To: to, Reason: reason}
}

func validPropagation(p catalog.Propagation) error {
	switch p {
	case "", catalog.PropagationForeground, catalog.PropagationBackground, catalog.PropagationOrphan:
		return nil
	}
	return fmt.Errorf("%w: propagation policy %q (want Foreground, Background or Orphan)", catalog.ErrInvalid, p)
}

// Schedule implements catalog.Store. It records the scheduling time in the
// lethe.io/deletion-scheduled-at annotation (RFC 3339).
func (s *Store) Schedule(ctx context.Context, k catalog.Key, opts catalog.ScheduleOptions) (*catalog.Resource, error) {
	if opts.Delay < 0 {
		return nil, fmt.Errorf("%w: negative deletion delay %s", catalog.ErrInvalid, opts.Delay)
	}
	if err := validPropagation(opts.Propagation); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{key: k, action: "schedule", actor: opts.Actor, reason: opts.Reason,
		apply: func(cur *catalog.Resource, now time.Time) (*catalog.Resource, error) {
			if cur.Phase != catalog.PhaseActive {
				return nil, transitionErr(cur, catalog.PhaseScheduled, "only an Active resource can be scheduled for deletion")
			}
			due := now.Add(opts.Delay)
			cur.Phase = catalog.PhaseScheduled
			cur.DeletionDueAt = &due
			cur.PropagationPolicy = opts.Propagation
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[catalog.AnnotationDeletionScheduledAt] = now.Format(time.RFC3339Nano)
			return cur, nil
		}})
}

// Undelete implements catalog.Store. It works until the resource enters
// Deleting, even after the delay has expired.
func (s *Store) Undelete(ctx context.Context, k catalog.Key, actor, reason string) (*catalog.Resource, error) {
	return s.mutate(ctx, mutation{key: k, action: "undelete", actor: actor, reason: reason,
		apply: func(cur *catalog.Resource, _ time.Time) (*catalog.Resource, error) {
			if cur.Phase != catalog.PhaseScheduled {
				return nil, transitionErr(cur, catalog.PhaseActive, "only a Scheduled resource can be undeleted")
			}
			cur.Phase = catalog.PhaseActive
			cur.DeletionDueAt = nil
			cur.PropagationPolicy = ""
			delete(cur.Annotations, catalog.AnnotationDeletionScheduledAt)
			if len(cur.Annotations) == 0 {
				cur.Annotations = nil
			}
			return cur, nil
		}})
}

// Delete implements catalog.Store. The propagation policy is opts'
// (else the one given to Schedule, else Foreground); opts.Finalizers are
// added to the existing ones.
func (s *Store) Delete(ctx context.Context, k catalog.Key, opts catalog.DeleteOptions) (*catalog.Resource, error) {
	if err := validPropagation(opts.Propagation); err != nil {
		return nil, err
	}
	action := "delete"
	if opts.Force {
		action = "force-delete"
	}
	return s.mutate(ctx, mutation{key: k, action: action, actor: opts.Actor, reason: opts.Reason,
		apply: func(cur *catalog.Resource, now time.Time) (*catalog.Resource, error) {
			if opts.OnlyIfScheduled && cur.Phase != catalog.PhaseScheduled {
				return nil, transitionErr(cur, catalog.PhaseDeleting, "no longer Scheduled (undeleted meanwhile?)")
			}
			switch cur.Phase {
			case catalog.PhaseActive:
			case catalog.PhaseScheduled:
				if !opts.Force && cur.DeletionDueAt != nil && now.Before(*cur.DeletionDueAt) {
					return nil, transitionErr(cur, catalog.PhaseDeleting,
						fmt.Sprintf("the deletion delay runs until %s; use force to skip it", cur.DeletionDueAt.Format(time.RFC3339)))
				}
			default:
				return nil, transitionErr(cur, catalog.PhaseDeleting, "already Deleting")
			}
			cur.PropagationPolicy = cmpOr(opts.Propagation, cur.PropagationPolicy, catalog.PropagationForeground)
			cur.Phase = catalog.PhaseDeleting
			cur.DeletionDueAt = nil
			ts := now
			cur.DeletionTimestamp = &ts
			for _, f := range opts.Finalizers {
				if !slices.Contains(cur.Finalizers, f) {
					cur.Finalizers = append(cur.Finalizers, f)
				}
			}
			return cur, nil
		}})
}

func cmpOr[T comparable](vs ...T) T {
	var zero T
	for _, v := range vs {
		if v != zero {
			return v
		}
	}
	return zero
}

// RemoveFinalizer implements catalog.Store. Removing a finalizer that is
// not there is a no-op that returns the resource unchanged (finalizer
// controllers may run more than once); on a resource that is not Deleting
// it is a *TransitionError.
func (s *Store) RemoveFinalizer(ctx context.Context, k catalog.Key, finalizer, actor string) (*catalog.Resource, error) {
	return s.mutate(ctx, mutation{key: k, action: "remove-finalizer", actor: actor, reason: finalizer,
		apply: func(cur *catalog.Resource, _ time.Time) (*catalog.Resource, error) {
			if cur.Phase != catalog.PhaseDeleting {
				return nil, transitionErr(cur, cur.Phase, "finalizers are removed only while Deleting")
			}
			i := slices.Index(cur.Finalizers, finalizer)
			if i < 0 {
				return nil, errNoop
			}
			cur.Finalizers = slices.Delete(cur.Finalizers, i, i+1)
			if len(cur.Finalizers) == 0 {
				cur.Finalizers = nil
			}
			return cur, nil
		}})
}

// Purge implements catalog.Store. The resource must be Deleting; Force
// only skips the remaining finalizers (and is audited as "force-purge").
// The DELETED event carries the last state with the purge's version.
func (s *Store) Purge(ctx context.Context, k catalog.Key, opts catalog.PurgeOptions) error {
	if len(opts.Details) > 0 && !json.Valid(opts.Details) {
		return fmt.Errorf("%w: purge details are not valid JSON", catalog.ErrInvalid)
	}
	now := s.clock()
	err := s.b.WriteTx(ctx, func(q Querier) error {
		ver, err := nextVersions(ctx, q, 1)
		if err != nil {
			return err
		}
		cur, err := s.getOne(ctx, q, k.String(), resourceByKey+s.d.ForUpdate, k.Kind, k.Namespace, k.Name)
		if err != nil {
			return err
		}
		if cur.Phase != catalog.PhaseDeleting {
			return transitionErr(cur, catalog.PhasePurged, "only a Deleting resource can be purged")
		}
		if len(cur.Finalizers) > 0 && !opts.Force {
			return transitionErr(cur, catalog.PhasePurged,
				fmt.Sprintf("finalizers remain: %s (use force to purge anyway)", strings.Join(cur.Finalizers, ", ")))
		}
		action := "purge"
		if opts.Force {
			action = "force-purge"
		}
		ts := catalog.Tombstone{Key: k, UID: cur.UID, PurgedAt: now, Actor: opts.Actor, Reason: opts.Reason, Details: opts.Details}
		tsDoc, err := encode(ts)
		if err != nil {
			return err
		}
		last := clone(cur)
		last.ResourceVersion = ver
		lastDoc, err := encode(last)
		if err != nil {
			return err
		}
		ch := changeStmt(catalog.EventDeleted, ver, last, lastDoc)
		details := opts.Details
		if opts.Force && len(cur.Finalizers) > 0 {
			m := map[string]any{"remainingFinalizers": cur.Finalizers}
			if len(opts.Details) > 0 {
				m["details"] = opts.Details
			}
			details, _ = json.Marshal(m)
		}
		if err := q.ExecBatch(ctx, []Stmt{
			{SQL: `DELETE FROM resources WHERE uid = $1`, Args: []any{cur.UID}},
			{SQL: `INSERT INTO tombstones (uid, kind, namespace, name, purged_at, doc) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (uid) DO UPDATE SET purged_at = excluded.purged_at, doc = excluded.doc`,
				Args: []any{cur.UID, k.Kind, k.Namespace, k.Name, nanos(now), tsDoc}},
			ch,
			auditStmt(catalog.AuditEntry{Time: now, Actor: opts.Actor, Action: action, Kind: k.Kind, Namespace: k.Namespace,
				Name: k.Name, UID: cur.UID, FromPhase: cur.Phase, ToPhase: catalog.PhasePurged, Reason: opts.Reason, Details: details}),
		}); err != nil {
			return err
		}
		return s.b.Notify(ctx, q, ver)
	})
	return s.mapErr(err)
}

// DueScheduled implements catalog.Store.
func (s *Store) DueScheduled(ctx context.Context, t time.Time, limit int) ([]*catalog.Resource, error) {
	if limit <= 0 {
		limit = listLimitDefault
	}
	return s.queryResources(ctx, s.b.Reader(),
		`SELECT doc FROM resources WHERE due_at IS NOT NULL AND due_at <= $1 ORDER BY due_at, uid LIMIT $2`, t.UnixNano(), limit)
}

// NextDue implements catalog.Store.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var n int64
	err := s.b.Reader().QueryRow(ctx, `SELECT due_at FROM resources WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1`).Scan(&n)
	if errors.Is(err, ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, s.mapErr(err)
	}
	return time.Unix(0, n).UTC(), true, nil
}

// GetTombstone implements catalog.Store: the newest tombstone of the key.
func (s *Store) GetTombstone(ctx context.Context, k catalog.Key) (*catalog.Tombstone, error) {
	var doc string
	err := s.b.Reader().QueryRow(ctx, `SELECT doc FROM tombstones WHERE kind = $1 AND namespace = $2 AND name = $3
ORDER BY purged_at DESC LIMIT 1`, k.Kind, k.Namespace, k.Name).Scan(&doc)
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("tombstone of %s: %w", k, catalog.ErrNotFound)
	}
	if err != nil {
		return nil, s.mapErr(err)
	}
	var t catalog.Tombstone
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return nil, fmt.Errorf("catalog: corrupt tombstone: %w", err)
	}
	return &t, nil
}

// Dependents implements catalog.Store, from the owner_edges index; ordered
// by kind, namespace and name.
func (s *Store) Dependents(ctx context.Context, ownerUID string) ([]*catalog.Resource, error) {
	out, err := s.queryResources(ctx, s.b.Reader(), `SELECT r.doc FROM owner_edges e JOIN resources r ON r.uid = e.dependent_uid
WHERE e.owner_uid = $1`, ownerUID)
	sortResources(out)
	return out, err
}

// Referrers implements catalog.Store, from the reference_edges index.
// References match the target's kind, namespace and name literally.
func (s *Store) Referrers(ctx context.Context, target catalog.Key) ([]*catalog.Resource, error) {
	out, err := s.queryResources(ctx, s.b.Reader(), `SELECT r.doc FROM reference_edges e JOIN resources r ON r.uid = e.referrer_uid
WHERE e.target_kind = $1 AND e.target_namespace = $2 AND e.target_name = $3`, target.Kind, target.Namespace, target.Name)
	sortResources(out)
	return out, err
}

func sortResources(rs []*catalog.Resource) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}
