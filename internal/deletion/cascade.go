package deletion

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// Backups take part in the garbage collector's graph (internal/gc): a
// Backup can own resources and be the target of references. A backup
// enters Deleting with the cascade finalizer besides the pipeline's own,
// and its record and tarball are purged only once nothing holds it:
//
//   - its items are settled (the delete-actions finalizer is gone), or the
//     operator abandoned them (Options.ForcePurge);
//   - its cascade is carried out (the cascade finalizer is gone): under
//     Foreground, no dependent with blockOwnerDeletion remains; under
//     Background and Orphan, the collector has handed its dependents on;
//   - no resource holds a block reference to it;
//   - no other finalizer is left (a user's: lethe finalize).
//
// A backup with neither dependents nor referrers needs no collector: the
// pipeline drops the cascade finalizer itself. Otherwise the run ends
// with ResultWaiting, and the collector, once the wait is over, purges the
// backup through Resume. The check is made again, on a fresh read, right
// before the tarball is touched (purge), so that nothing is purged before
// its blocking dependents, whoever drives it and wherever it crashed.

// WaitRecheck is how long the work item of a backup waiting on its
// cascade is put off: the collector resumes it as soon as the wait is
// over; this is only the safety net.
const WaitRecheck = 5 * time.Minute

// ErrHeld means a backup's purge was refused because its cascade still
// holds it (see Held).
var ErrHeld = errors.New("held by its cascade")

// Held lists what still holds the Deleting backup r from its purge, as
// short phrases; empty means it may be purged. forced says that the
// operator abandons the backup's unsettled items: the delete-actions
// finalizer then holds nothing, but the cascade still does. When r has the
// cascade finalizer and neither dependents nor referrers, the finalizer is
// removed here (under ctx's fence) and the returned resource is the
// updated one.
func (d *Deleter) Held(ctx context.Context, r *catalog.Resource, forced bool) (*catalog.Resource, []string, error) {
	var deps, refs []*catalog.Resource
	if slices.Contains(r.Finalizers, catalog.FinalizerCascade) {
		var err error
		if deps, err = d.cfg.Store.Dependents(ctx, r.UID); err != nil {
			return nil, nil, err
		}
		if refs, err = d.cfg.Store.Referrers(ctx, r.Key()); err != nil {
			return nil, nil, err
		}
		if len(deps) == 0 && len(refs) == 0 {
			// Nothing to cascade to: the collector would only drop it.
			nr, err := d.cfg.Store.RemoveFinalizer(catalog.WithDefaultActor(ctx, "lethe"), r.Key(), catalog.FinalizerCascade)
			if errors.Is(err, catalog.ErrInvalidTransition) {
				return nil, nil, fmt.Errorf("backup %s changed meanwhile (%w): refusing to purge it", r.Name, err)
			}
			if err != nil {
				return nil, nil, err
			}
			if nr.UID != r.UID {
				return nil, nil, fmt.Errorf("backup %s (uid %s) is not the Deleting backup %s any more: refusing to purge it", r.Name, nr.UID, r.UID)
			}
			r = nr
		}
	} else {
		var err error
		if refs, err = d.cfg.Store.Referrers(ctx, r.Key()); err != nil {
			return nil, nil, err
		}
	}
	var why []string
	for _, f := range r.Finalizers {
		switch f {
		case catalog.FinalizerDeleteActions:
			if !forced {
				why = append(why, "its items (finalizer "+f+")")
			}
		case catalog.FinalizerCascade:
			why = append(why, cascadeWait(r, deps)...)
		default:
			why = append(why, "finalizer "+f+" (removed by its controller, or: lethe finalize backup "+r.Name+" "+f+")")
		}
	}
	for _, x := range refs {
		if blocks(x, r) {
			why = append(why, "block reference from "+x.Key().String())
		}
	}
	return r, why, nil
}

// cascadeWait says what the cascade finalizer of r waits for.
func cascadeWait(r *catalog.Resource, deps []*catalog.Resource) []string {
	var out []string
	foreground := r.PropagationPolicy == "" || r.PropagationPolicy == catalog.PropagationForeground
	for _, x := range deps {
		for _, o := range x.Owners {
			if o.UID == r.UID && o.BlockOwnerDeletion && foreground {
				out = append(out, "dependent "+x.Key().String()+" (blockOwnerDeletion, Foreground)")
				break
			}
		}
	}
	if len(out) == 0 {
		out = append(out, "its cascade (finalizer "+catalog.FinalizerCascade+", removed by the garbage collector once its dependents and referrers are handled)")
	}
	return out
}

// blocks reports whether x holds a block reference to r.
func blocks(x, r *catalog.Resource) bool {
	for _, ref := range x.References {
		if ref.OnTargetDelete == catalog.RefBlock && ref.Kind == r.Kind && ref.Namespace == r.Namespace && ref.Name == r.Name &&
			(ref.UID == "" || ref.UID == r.UID) {
			return true
		}
	}
	return false
}

// waiting ends a run whose backup is still held by its cascade.
func (d *Deleter) waiting(ctx context.Context, r *catalog.Resource, rep *Report, why []string) *Report {
	rep.Result, rep.WaitingFor = ResultWaiting, why
	d.noteWaiting(context.WithoutCancel(ctx), r, why)
	return rep
}

// noteWaiting records in the backup's deletion status what holds it
// (shown by lethe backup describe); nil clears it.
func (d *Deleter) noteWaiting(ctx context.Context, r *catalog.Resource, why []string) {
	for range 3 {
		cur, err := d.cfg.Store.Get(ctx, r.Key())
		if err != nil || cur.UID != r.UID {
			return
		}
		b, err := backup.FromResource(cur)
		if err != nil {
			return
		}
		if b.Status.Deletion == nil {
			if len(why) == 0 {
				return
			}
			b.Status.Deletion = &backup.DeletionStatus{StartedAt: d.now()}
		}
		if slices.Equal(b.Status.Deletion.WaitingFor, why) {
			return
		}
		b.Status.Deletion.WaitingFor = why
		b.Status.Deletion.UpdatedAt = d.now()
		if err := b.Encode(); err != nil {
			return
		}
		if _, err := d.cfg.Store.Update(ctx, cur); !errors.Is(err, catalog.ErrConflict) {
			return
		}
	}
}

// Resume purges a Deleting backup whose items are settled and whose
// cascade no longer holds it: the garbage collector calls it once the
// wait is over (see gc.Config.PurgeBackup). It claims the deletion's
// lease like any run; a live lease, held elsewhere or by a run of this
// very process, is a *catalog.LeaseHeldError (that run carries on). A backup whose items are not settled yet is
// left to its pipeline run (nil report), as is one already gone.
func (d *Deleter) Resume(ctx context.Context, uid string, opts Options) (*Report, error) {
	r, err := d.cfg.Store.GetByUID(ctx, uid)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if r.Kind != backup.Kind || r.Phase != catalog.PhaseDeleting || slices.Contains(r.Finalizers, catalog.FinalizerDeleteActions) {
		return nil, nil
	}
	b, err := backup.FromResource(r)
	if err != nil {
		return nil, err
	}
	cur, err := d.cfg.Store.Enqueue(ctx, catalog.WorkItem{Queue: Queue, Key: uid, RunAt: d.now()})
	if err != nil {
		return nil, err
	}
	// A run holding the lease, this process's own included (a claim by
	// the same holder would fence it off), finishes the purge itself.
	if cur.Holder != "" && cur.LeaseExpiresAt.After(d.now()) && !deadLocalHolder(cur.Holder) {
		return nil, &catalog.LeaseHeldError{Queue: Queue, Key: uid, Holder: cur.Holder, ExpiresAt: cur.LeaseExpiresAt}
	}
	w, err := d.claim(ctx, uid)
	if err != nil {
		return nil, err
	}
	return d.runLeased(ctx, b, w, opts)
}

// BlockedError refuses a direct deletion request of a backup that live
// resources (not themselves being deleted) hold block references to, as
// lethe delete refuses it for any kind (Crossplane's Usage): nothing
// changes. Inside a cascade, or for the daemon, the backup is not refused:
// its purge waits for them (Held).
type BlockedError struct {
	Backup    string
	Referrers []catalog.Key
}

func (e *BlockedError) Error() string {
	names := make([]string, len(e.Referrers))
	for i, k := range e.Referrers {
		names[i] = k.String()
	}
	return fmt.Sprintf("refusing to delete Backup/%s: it is the target of block references from %s (delete them first, or change their onTargetDelete)",
		e.Backup, strings.Join(names, ", "))
}

// checkBlocked refuses a request (not the daemon's) to delete a backup
// that is not Deleting yet and that live block referrers hold.
func (d *Deleter) checkBlocked(ctx context.Context, r *catalog.Resource, opts Options) error {
	if opts.Unattended || r.Phase == catalog.PhaseDeleting {
		return nil
	}
	refs, err := d.cfg.Store.Referrers(ctx, r.Key())
	if err != nil {
		return err
	}
	var live []catalog.Key
	for _, x := range refs {
		if x.Phase != catalog.PhaseDeleting && blocks(x, r) {
			live = append(live, x.Key())
		}
	}
	if len(live) > 0 {
		return &BlockedError{Backup: r.Name, Referrers: live}
	}
	return nil
}

// heldError is the refusal of a purge whose backup is held.
func heldError(name string, why []string) error {
	return fmt.Errorf("backup %s: %w: waiting for %s; refusing to purge it", name, ErrHeld, joinWhy(why))
}

func joinWhy(why []string) string { return strings.Join(why, "; ") }
