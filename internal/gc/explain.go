package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/retry"
	"github.com/lethehq/lethe/internal/termtext"
)

// Explanation says why a resource is not gone yet. Its JSON form is a
// stable schema: {"resource": {"kind","namespace","name"}, "phase",
// "reason", "waitingFor": [...same shape...]}, plus "finalizers" (those
// left), "stuck" (true when the wait is on something not being
// deleted), "retries" (its rows in the retry queue) and "deletionRoot"
// (the resource whose requested deletion reached it through a cascade).
type Explanation struct {
	Resource catalog.Key   `json:"resource"`
	Phase    catalog.Phase `json:"phase"`
	Reason   string        `json:"reason"`
	// DeletionRoot is the root of the cascade that is deleting it (or
	// purged it), when that is not itself.
	DeletionRoot *catalog.ObjectRef `json:"deletionRoot,omitempty"`
	Finalizers   []string           `json:"finalizers,omitempty"`
	Stuck        bool               `json:"stuck,omitempty"`
	Retries      []RetryInfo        `json:"retries,omitempty"`
	WaitingFor   []*Explanation     `json:"waitingFor"`
}

// RetryInfo is one row of the retry queue, as explain shows it: read
// from the queue when explain runs, so it is what `lethe retry get ID`
// says (after `retry now` too).
type RetryInfo struct {
	ID            int64              `json:"id"`
	Kind          string             `json:"type"` // the row's type (BackupItem, Resource, Wait)
	ItemID        string             `json:"itemId,omitempty"`
	Plugin        string             `json:"plugin,omitempty"`
	State         catalog.RetryState `json:"state"`
	Attempts      int                `json:"attempts"`
	NextAttemptAt time.Time          `json:"nextAttemptAt,omitzero"`
	LastError     string             `json:"lastError,omitempty"`
}

// maxExplainRetries caps the retry rows shown for one resource (a
// backup may have thousands of items waiting: lethe retry list has them).
const maxExplainRetries = 5

// retryRows reads r's rows of the retry queue (at most maxExplainRetries,
// and whether there are more) and says them in one line each.
func (c *Collector) retryRows(ctx context.Context, r *catalog.Resource, keep func(*catalog.RetryRow) bool) ([]RetryInfo, []string, error) {
	all, err := c.cfg.Retry.List(ctx, catalog.RetryFilter{OwnerUID: r.UID, Limit: maxExplainRetries + 1})
	if err != nil || len(all) == 0 {
		return nil, nil, err
	}
	rows := slices.DeleteFunc(all, func(row *catalog.RetryRow) bool { return !keep(row) })
	var infos []RetryInfo
	var lines []string
	for i, row := range rows {
		if i == maxExplainRetries {
			lines = append(lines, "more rows in the retry queue: lethe retry list --type "+row.Kind)
			break
		}
		infos = append(infos, RetryInfo{ID: row.ID, Kind: row.Kind, ItemID: row.ItemID, Plugin: row.Plugin, State: row.State,
			Attempts: row.Attempts, NextAttemptAt: row.NextAttemptAt, LastError: row.LastError})
		what := "waits"
		switch {
		case row.Kind == retry.KindWait, row.Kind == retry.KindLocation:
			what = "waits on " + row.ItemID
		case row.Plugin != "" && row.ItemID != "":
			what = "item " + row.ItemID + " at plugin " + row.Plugin + " " + lastOutcome(row)
		case row.Plugin != "":
			what = "plugin " + row.Plugin + " " + lastOutcome(row)
		}
		next := "next attempt at " + row.NextAttemptAt.UTC().Format(time.RFC3339)
		switch row.State {
		case catalog.RetryDiscarded:
			next = "discarded (a dead letter): lethe retry now " + strconv.FormatInt(row.ID, 10) + " once the cause is fixed"
		case catalog.RetryRunning:
			next = "being retried now by " + row.Holder
		}
		lines = append(lines, fmt.Sprintf("retry row %d: %s, %s, last error: %s; %s", row.ID, what, attempts(row.Attempts), cmp.Or(row.LastError, "-"), next))
	}
	return infos, lines, nil
}

// maxExplainChildren caps the resources listed under one node.
const maxExplainChildren = 20

// Explain says why k is not gone yet, recursively, as a tree. A purged
// resource is explained from its tombstone.
func (c *Collector) Explain(ctx context.Context, k catalog.Key) (*Explanation, error) {
	r, err := c.st.Get(ctx, k)
	if errors.Is(err, catalog.ErrNotFound) {
		ts, terr := c.st.GetTombstone(ctx, k)
		if terr != nil {
			return nil, err
		}
		return c.explainPurged(ctx, k, ts)
	}
	if err != nil {
		return nil, err
	}
	return c.explain(ctx, r, nil, 0, newExplainState())
}

// explainState is what one tree remembers while it is built.
type explainState struct {
	// said holds the cycles the tree has printed already: each is printed
	// once.
	said map[string]bool
	// done holds the resources explained already, by UID: a resource that
	// several parents wait for (a diamond of owners) is explained once and
	// named again below the others, so that the tree grows with the graph,
	// not with the number of paths through it (which doubles with each
	// layer of a diamond).
	done map[string]*Explanation
}

func newExplainState() *explainState {
	return &explainState{said: map[string]bool{}, done: map[string]*Explanation{}}
}

// explain explains r, reached through path (the UIDs above it).
func (c *Collector) explain(ctx context.Context, r *catalog.Resource, path []string, depth int, st *explainState) (*Explanation, error) {
	e := &Explanation{Resource: r.Key(), Phase: r.Phase, Finalizers: r.Finalizers, DeletionRoot: r.DeletionRoot, WaitingFor: []*Explanation{}}
	if slices.Contains(path, r.UID) {
		e.Reason = "cycle: " + r.Key().String() + " is already waiting further up this tree"
		e.Stuck = true
		return e, nil
	}
	path = append(path, r.UID)
	switch r.Phase {
	case catalog.PhaseActive:
		e.Reason = "Active: not being deleted"
		return e, nil
	case catalog.PhaseScheduled:
		e.Reason = "Scheduled: not being deleted yet"
		if r.DeletionDueAt != nil {
			e.Reason += "; the grace window ends at " + r.DeletionDueAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		return e, nil
	}
	if prev, ok := st.done[r.UID]; ok {
		e.Reason = "explained above"
		e.Stuck = prev.Stuck
		return e, nil
	}
	defer func() { st.done[r.UID] = e }()
	var reasons []string
	// A cycle is said first, and once in the tree: where it is met first.
	if cond := stuckCondition(r); cond != nil && cond.Reason == ReasonCycle {
		if st.said[cond.Message] {
			reasons = append(reasons, "on the cycle above")
		} else {
			st.said[cond.Message] = true
			reasons = append(reasons, cond.Message)
		}
	}
	add := func(child *catalog.Resource, why string) error {
		if len(e.WaitingFor) >= maxExplainChildren {
			return nil
		}
		var ce *Explanation
		if depth >= 32 {
			ce = &Explanation{Resource: child.Key(), Phase: child.Phase, Reason: "(deeper levels not shown)", WaitingFor: []*Explanation{}}
		} else {
			var err error
			if ce, err = c.explain(ctx, child, path, depth+1, st); err != nil {
				return err
			}
		}
		ce.Reason = why + "; " + ce.Reason
		if child.Phase != catalog.PhaseDeleting {
			ce.Stuck = true
		}
		e.WaitingFor = append(e.WaitingFor, ce)
		return nil
	}
	policy := Propagation(r.PropagationPolicy)
	carryingOut := false
	if slices.Contains(r.Finalizers, catalog.FinalizerCascade) && policy == Foreground {
		deps, err := c.st.Dependents(ctx, r.UID)
		if err != nil {
			return nil, err
		}
		n := 0
		for _, d := range deps {
			if edge := ownerEdge(d, r.UID); edge == nil || !edge.BlockOwnerDeletion {
				continue
			}
			n++
			if err := add(d, "dependent with blockOwnerDeletion of "+r.Key().String()); err != nil {
				return nil, err
			}
		}
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("waiting for %s with blockOwnerDeletion (Foreground)", counted(n, "dependent")))
		} else if !slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
			// While the plugins still have it, they are what it waits
			// for (said below): the cascade finalizer goes after them.
			carryingOut = true
		}
	}
	refs, err := c.st.Referrers(ctx, r.Key())
	if err != nil {
		return nil, err
	}
	var blockers, cascaders []string
	// live are the waits that hold it now (the item ids of its KindWait
	// rows): a row the collector has not removed yet for a wait that is
	// gone (a purged blocker) is not shown.
	live := map[string]bool{}
	for _, f := range r.Finalizers {
		live[waitFinalizer+f] = true
	}
	for _, x := range refs {
		for _, ref := range refsTo(x, r) {
			if ref.OnTargetDelete == catalog.RefCascade && policy == Foreground && slices.Contains(r.Finalizers, catalog.FinalizerCascade) {
				cascaders = append(cascaders, x.Key().String())
				if err := add(x, "holds a cascade reference to "+r.Key().String()+", which waits until it is purged"); err != nil {
					return nil, err
				}
				break
			}
			if ref.OnTargetDelete != catalog.RefBlock {
				continue
			}
			blockers = append(blockers, x.Key().String())
			live[waitReference+x.Key().String()] = true
			what := "holds a block reference to " + r.Key().String()
			if x.Phase != catalog.PhaseDeleting {
				what += ", and is not being deleted"
			}
			if err := add(x, what); err != nil {
				return nil, err
			}
			break
		}
	}
	if carryingOut && len(cascaders) == 0 {
		reasons = append(reasons, "its cascade is being carried out (finalizer "+catalog.FinalizerCascade+")")
	}
	if len(cascaders) > 0 {
		reasons = append(reasons, fmt.Sprintf("waiting for %s with a cascade reference to it (Foreground): %s", counted(len(cascaders), "referrer"), strings.Join(cascaders, ", ")))
	}
	if len(blockers) > 0 {
		reasons = append(reasons, r.Key().String()+" is blocked by "+strings.Join(blockers, ", ")+" (block reference): it cannot be purged while they exist")
	}
	infos, lines, err := c.retryRows(ctx, r, func(row *catalog.RetryRow) bool { return row.Kind != retry.KindWait || live[row.ItemID] })
	if err != nil {
		return nil, err
	}
	e.Retries = infos
	if slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
		if slices.ContainsFunc(infos, func(i RetryInfo) bool { return i.Kind != retry.KindWait }) {
			e.Stuck = true
		} else if r.Kind == BackupKind {
			reasons = append(reasons, "its backup items are being deleted by the plugins (lethe backup describe "+r.Name+")")
		} else {
			reasons = append(reasons, "plugins have not finished with it yet (finalizer "+catalog.FinalizerDeleteActions+")")
		}
	}
	for _, f := range r.Finalizers {
		if f != catalog.FinalizerCascade && f != catalog.FinalizerDeleteActions {
			reasons = append(reasons, "waiting for finalizer "+f+" (removed by its controller, or: lethe finalize "+finalizeArgs(r.Key(), f)+")")
			e.Stuck = true
		}
	}
	if cond := stuckCondition(r); cond != nil {
		// What explain reads live wins over a condition the collector
		// has not rewritten yet: a blocker purged since, a finalizer
		// removed since.
		switch cond.Reason {
		case "BlockedByReferrer", "DependentStuck", ReasonReferrerStuck:
			// Stuck while what it waits for is (read live below it).
			for _, ch := range e.WaitingFor {
				e.Stuck = e.Stuck || ch.Stuck
			}
		case "WaitingForFinalizer":
		default:
			e.Stuck = true
		}
	}
	reasons = append(reasons, lines...)
	if len(reasons) == 0 {
		reasons = append(reasons, "nothing holds it: the collector purges it on its next pass")
	}
	e.Reason = "Deleting: " + strings.Join(reasons, "; ")
	return e, nil
}

// WriteTree prints an explanation as an indented tree. A resource
// deleted by a cascade says whose ("in the cascade of ROOT") where the
// tree does not already: at the top, and below a resource of another
// cascade.
func WriteTree(w io.Writer, e *Explanation) error {
	return writeTree(w, e, "", "", nil)
}

func writeTree(w io.Writer, e *Explanation, first, rest string, above *catalog.ObjectRef) error {
	mark := ""
	if e.Stuck {
		mark = " [stuck]"
	}
	cascade := ""
	root := rootKey(e)
	if e.DeletionRoot != nil && (above == nil || root != *above) {
		cascade = ", in the cascade of " + termtext.Quote(e.DeletionRoot.String())
	}
	// The resource, its phase and the reason (which names other
	// resources, plugins and their messages) come from the catalog:
	// quoted when they are not plain text.
	if _, err := fmt.Fprintf(w, "%s%s (%s%s)%s: %s\n", first, termtext.Quote(e.Resource.String()), termtext.Quote(string(e.Phase)), cascade, mark, termtext.Quote(e.Reason)); err != nil {
		return err
	}
	for i, ch := range e.WaitingFor {
		f, r := rest+"├─ ", rest+"│  "
		if i == len(e.WaitingFor)-1 {
			f, r = rest+"└─ ", rest+"   "
		}
		if err := writeTree(w, ch, f, r, &root); err != nil {
			return err
		}
	}
	return nil
}

// rootKey is the root of the cascade e's resource is in: its
// DeletionRoot, or itself.
func rootKey(e *Explanation) catalog.ObjectRef {
	if e.DeletionRoot != nil {
		return catalog.ObjectRef{Kind: e.DeletionRoot.Kind, Namespace: e.DeletionRoot.Namespace, Name: e.DeletionRoot.Name}
	}
	return catalog.ObjectRef{Kind: e.Resource.Kind, Namespace: e.Resource.Namespace, Name: e.Resource.Name}
}

// explainPurged explains a purged resource from its tombstone, and lists
// what its deletion set off that has not finished yet (Background, or
// a referrer entered by its cascade): its dependents and the referrers
// holding a cascade reference to it that are still Deleting.
func (c *Collector) explainPurged(ctx context.Context, k catalog.Key, ts *catalog.Tombstone) (*Explanation, error) {
	e := &Explanation{Resource: k, Phase: catalog.PhasePurged, Reason: "purged at " + ts.PurgedAt.Format("2006-01-02T15:04:05Z07:00") + " by " + ts.Actor,
		DeletionRoot: ts.DeletionRoot, WaitingFor: []*Explanation{}}
	st := newExplainState()
	var left []*catalog.Resource
	var why []string
	if ts.UID != "" {
		deps, err := c.st.Dependents(ctx, ts.UID)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			if d.Phase == catalog.PhaseDeleting && ownerEdge(d, ts.UID) != nil {
				left, why = append(left, d), append(why, "dependent of "+k.String()+", its deletion not finished")
			}
		}
	}
	refs, err := c.st.Referrers(ctx, k)
	if err != nil {
		return nil, err
	}
	for _, x := range refs {
		for _, ref := range x.References {
			if ref.OnTargetDelete == catalog.RefCascade && ref.Kind == k.Kind && ref.Namespace == k.Namespace && ref.Name == k.Name &&
				(ref.UID == "" || ref.UID == ts.UID) && x.Phase == catalog.PhaseDeleting {
				left, why = append(left, x), append(why, "held a cascade reference to "+k.String()+", its deletion not finished")
				break
			}
		}
	}
	for i, x := range left {
		if len(e.WaitingFor) >= maxExplainChildren {
			break
		}
		ce, err := c.explain(ctx, x, nil, 1, st)
		if err != nil {
			return nil, err
		}
		ce.Reason = why[i] + "; " + ce.Reason
		e.WaitingFor = append(e.WaitingFor, ce)
	}
	if len(left) > 0 {
		what := fmt.Sprintf("%d resources", len(left))
		if len(left) == 1 {
			what = "1 resource"
		}
		e.Reason += "; what its deletion set off is not finished: " + what
	}
	return e, nil
}

// attempts counts a retry row's attempts: "1 attempt", "3 attempts".
func attempts(n int) string { return counted(n, "attempt") }

// counted is n and word, plural unless n is 1: "1 dependent", "2 dependents".
func counted(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
