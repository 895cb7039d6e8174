package sqlstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/termtext"
)

// Resources: create, read, list and update. Phase changes are in lifecycle.go.

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
		r.DeletionDueAt, r.DeletionTimestamp, r.PropagationPolicy, r.DeletionRoot = nil, nil, "", nil
		r.CreatedAt, r.UpdatedAt = now, now
		out[i] = r
	}
	var (
		resRows, ownerRows, refRows, changeRows, auditRows [][]any
	)
	err := s.writeTx(ctx, func(q Querier) error {
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
		if err := s.checkCycles(ctx, q, out); err != nil {
			return err
		}
		return q.ExecBatch(ctx, s.b.Notify())
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
			return nil, fmt.Errorf("%s: %w", termtext.Quote(what), catalog.ErrNotFound)
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

// Update implements catalog.Store.
func (s *Store) Update(ctx context.Context, r *catalog.Resource) (*catalog.Resource, error) {
	if err := validateResource(r); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{key: r.Key(), action: "update", actor: catalog.ActorFrom(ctx), rewriteEdges: true,
		changes: true,
		apply: func(cur *catalog.Resource, _ time.Time) (*catalog.Resource, error) {
			next, err := updated(cur, r)
			if err == nil && changedFields(cur, next) == "" {
				return nil, errNoop // nothing to write, nothing to audit
			}
			return next, err
		}})
}

// updated is the new state when r updates cur (Update, WriteBatch).
func updated(cur, r *catalog.Resource) (*catalog.Resource, error) {
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
	next.DeletionRoot = cur.DeletionRoot
	next.CreatedAt = cur.CreatedAt
	return next, nil
}
