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
// deleted) and "retries" (its rows in the retry queue).
type Explanation struct {
	Resource   catalog.Key    `json:"resource"`
	Phase      catalog.Phase  `json:"phase"`
	Reason     string         `json:"reason"`
	Finalizers []string       `json:"finalizers,omitempty"`
	Stuck      bool           `json:"stuck,omitempty"`
	Retries    []RetryInfo    `json:"retries,omitempty"`
	WaitingFor []*Explanation `json:"waitingFor"`
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
func (c *Collector) retryRows(ctx context.Context, r *catalog.Resource) ([]RetryInfo, []string, error) {
	rows, err := c.cfg.Retry.List(ctx, catalog.RetryFilter{OwnerUID: r.UID, Limit: maxExplainRetries + 1})
	if err != nil || len(rows) == 0 {
		return nil, nil, err
	}
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
		case row.Kind == retry.KindWait:
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
		lines = append(lines, fmt.Sprintf("retry row %d: %s, %d attempt(s), last error: %s; %s", row.ID, what, row.Attempts, cmp.Or(row.LastError, "-"), next))
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
		return &Explanation{Resource: k, Phase: catalog.PhasePurged, Reason: "purged at " + ts.PurgedAt.Format("2006-01-02T15:04:05Z07:00") + " by " + ts.Actor, WaitingFor: []*Explanation{}}, nil
	}
	if err != nil {
		return nil, err
	}
	return c.explain(ctx, r, nil, 0)
}

// relation says how a parent waits for a child.
func (c *Collector) explain(ctx context.Context, r *catalog.Resource, path []string, depth int) (*Explanation, error) {
	e := &Explanation{Resource: r.Key(), Phase: r.Phase, Finalizers: r.Finalizers, WaitingFor: []*Explanation{}}
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
	var reasons []string
	add := func(child *catalog.Resource, why string) error {
		if len(e.WaitingFor) >= maxExplainChildren {
			return nil
		}
		var ce *Explanation
		if depth >= 32 {
			ce = &Explanation{Resource: child.Key(), Phase: child.Phase, Reason: "(deeper levels not shown)", WaitingFor: []*Explanation{}}
		} else {
			var err error
			if ce, err = c.explain(ctx, child, path, depth+1); err != nil {
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
			reasons = append(reasons, fmt.Sprintf("waiting for %d dependent(s) with blockOwnerDeletion (Foreground)", n))
		} else if !slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
			// While the plugins still have it, they are what it waits
			// for (said below): the cascade finalizer goes after them.
			reasons = append(reasons, "its cascade is being carried out (finalizer "+catalog.FinalizerCascade+")")
		}
	}
	refs, err := c.st.Referrers(ctx, r.Key())
	if err != nil {
		return nil, err
	}
	var blockers []string
	for _, x := range refs {
		for _, ref := range refsTo(x, r) {
			if ref.OnTargetDelete != catalog.RefBlock {
				continue
			}
			blockers = append(blockers, x.Key().String())
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
	if len(blockers) > 0 {
		reasons = append(reasons, r.Key().String()+" is blocked by "+strings.Join(blockers, ", ")+" (block reference): it cannot be purged while they exist")
	}
	infos, lines, err := c.retryRows(ctx, r)
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
		e.Stuck = true
	}
	reasons = append(reasons, lines...)
	if len(reasons) == 0 {
		reasons = append(reasons, "nothing holds it: the collector purges it on its next pass")
	}
	e.Reason = "Deleting: " + strings.Join(reasons, "; ")
	return e, nil
}

// WriteTree prints an explanation as an indented tree.
func WriteTree(w io.Writer, e *Explanation) error {
	return writeTree(w, e, "", "")
}

func writeTree(w io.Writer, e *Explanation, first, rest string) error {
	mark := ""
	if e.Stuck {
		mark = " [stuck]"
	}
	// The resource, its phase and the reason (which names other
	// resources, plugins and their messages) come from the catalog:
	// quoted when they are not plain text.
	if _, err := fmt.Fprintf(w, "%s%s (%s)%s: %s\n", first, termtext.Quote(e.Resource.String()), termtext.Quote(string(e.Phase)), mark, termtext.Quote(e.Reason)); err != nil {
		return err
	}
	for i, ch := range e.WaitingFor {
		f, r := rest+"├─ ", rest+"│  "
		if i == len(e.WaitingFor)-1 {
			f, r = rest+"└─ ", rest+"   "
		}
		if err := writeTree(w, ch, f, r); err != nil {
			return err
		}
	}
	return nil
}
