package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/manifest"
	"github.com/lethehq/lethe/internal/storageloc"
)

func (e *Engine) planItem(ctx context.Context, p *plan, it *item) error {
	d, cur, ch := it.doc, it.cur, it.change
	if it.letheErr != nil {
		return it.letheErr
	}
	if err := e.planPeerReferences(ctx, it); err != nil {
		return err
	}
	// The sync filter, and what bundles own.
	if it.bundle != nil && it.bundle.skipped {
		it.skipped = true
		ch.Action, ch.Reason = Skipped, fmt.Sprintf("its bundle is %s", it.bundle.cur.Phase)
		if cur != nil {
			ch.UID, ch.Phase, ch.ResourceVersion = cur.UID, cur.Phase, cur.ResourceVersion
			if it.asStored {
				ch.Action, ch.Reason = Unchanged, ""
			}
		} else if it.bundle.asStored {
			// The bundle's document is the stored bundle (what get prints
			// of it): a member it lists that is gone, purged by the
			// bundle's own deletion, asks for nothing.
			ch.Action, ch.Reason = Unchanged, fmt.Sprintf("purged; its bundle is %s", it.bundle.cur.Phase)
		}
		return nil
	}
	if cur != nil {
		ch.UID, ch.Phase, ch.ResourceVersion = cur.UID, cur.Phase, cur.ResourceVersion
		ch.DueAt = cur.DeletionDueAt
		if o, ok := bundleOwner(cur.Owners); ok && it.bundle != nil && (it.bundle.cur == nil || it.bundle.cur.UID != o.UID) {
			return refuse(d.Errorf("", "%s already belongs to Bundle/%s (uid %s); remove it from that bundle first", d.Key(), o.Name, o.UID))
		}
		if v := d.Metadata.ResourceVersion; v != 0 && v != cur.ResourceVersion {
			return &ConflictError{Key: d.Key(), Err: fmt.Errorf("the manifest has resourceVersion %d but the catalog has %d (it changed since the manifest was written)", v, cur.ResourceVersion)}
		}
		// A Backup, or a member on its own: taken back unchanged, never
		// changed (kept.go).
		if it.readOnly && it.diff != noField {
			return refuseChange(d, cur.Owners, it.diff)
		}
		// Only its own bundle adopts a Scheduled member.
		o, owned := bundleOwner(cur.Owners)
		adopt := it.bundle != nil && cur.Phase == catalog.PhaseScheduled && owned && it.bundle.cur != nil && o.UID == it.bundle.cur.UID
		if cur.Phase != catalog.PhaseActive && !adopt {
			// Nothing is written for it (nor for a bundle's members, and
			// no member is pruned); a document that is the stored
			// resource, what get prints of it, is unchanged. A member
			// that its Active bundle lists is skipped: the bundle asks
			// for it back, and apply does not bring it back.
			it.skipped = true
			if it.asStored && it.bundle == nil {
				if o, member := bundleOwner(cur.Owners); member && it.readOnly {
					ch.Bundle = catalog.Key{Kind: manifest.KindBundle, Name: o.Name}.String()
				}
				ch.Action = Unchanged
				return nil
			}
			ch.Action = Skipped
			if cur.Phase == catalog.PhaseScheduled {
				ch.Reason = fmt.Sprintf("Scheduled for deletion at %s: apply does not change it (undelete it first)", cur.DeletionDueAt.UTC().Format(time.RFC3339))
			} else {
				ch.Reason = "Deleting: apply does not change or re-create it; apply again once it is purged"
			}
			return nil
		}
		if it.readOnly {
			if o, member := bundleOwner(cur.Owners); member {
				ch.Bundle = catalog.Key{Kind: manifest.KindBundle, Name: o.Name}.String()
			}
			ch.Action = Unchanged
			return nil
		}
	} else if keptKind(d.Kind) {
		return keptMissing(d)
	} else if d.Metadata.ResourceVersion != 0 {
		return &ConflictError{Key: d.Key(), Err: fmt.Errorf("the manifest has resourceVersion %d, but it does not exist", d.Metadata.ResourceVersion)}
	}

	// The desired state.
	var want *catalog.Resource
	if p.take {
		want = d.TakeResource()
	} else {
		want = d.Resource()
	}
	if it.bundle != nil {
		b := it.bundle
		uid := ""
		if b.cur != nil {
			uid = b.cur.UID
		} else {
			uid = b.newUID()
		}
		want.Owners = append(want.Owners, catalog.OwnerRef{UID: uid, Kind: manifest.KindBundle, Name: b.change.Name, BlockOwnerDeletion: true})
		it.deps = append(it.deps, b)
	}
	for i, o := range d.Metadata.OwnerReferences {
		field := fmt.Sprintf("metadata.ownerReferences[%d]", i)
		ref, dep, err := e.resolveOwner(ctx, p, d, o)
		if err != nil {
			return refuse(d.Errorf(field, "%v", err))
		}
		if it.bundle != nil && ref.Kind == manifest.KindBundle {
			return refuse(d.Errorf(field, "a bundle member's bundle is its owner already"))
		}
		want.Owners = append(want.Owners, ref)
		if dep != nil {
			it.deps = append(it.deps, dep)
		}
	}
	for i, r := range d.References {
		if r.OnTargetDelete == catalog.RefAllowDangling || r.Peer != "" {
			continue
		}
		k := catalog.Key{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
		field := fmt.Sprintf("references[%d]", i)
		if t, ok := p.byKey[k]; ok {
			if t.cur != nil && t.cur.Phase == catalog.PhaseDeleting {
				return refuse(d.Errorf(field, "target %s is being deleted", k))
			}
			continue
		}
		t, err := e.st.Get(ctx, k)
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			return refuse(d.Errorf(field, "%s target %s does not exist (in the catalog or in this apply); use allowDangling for a target that may be missing", r.OnTargetDelete, k))
		case err != nil:
			return err
		case t.Phase == catalog.PhaseDeleting:
			return refuse(d.Errorf(field, "target %s is being deleted", k))
		}
	}
	if cur == nil {
		want.UID = it.newUID()
		it.desired = want
		ch.UID, ch.Phase, ch.Action = want.UID, catalog.PhaseActive, Created
		return nil
	}
	// What apply does not manage is kept: the status when the manifest
	// has none, and the conditions.
	want.UID = cur.UID
	want.ResourceVersion = cur.ResourceVersion
	if len(want.Status) == 0 {
		want.Status = cur.Status
	}
	want.Conditions = cur.Conditions
	if cur.Phase == catalog.PhaseScheduled {
		// Adoption: back to Active, the countdown cancelled.
		it.desired = want
		p.adoptions = append(p.adoptions, it)
		ch.Action, ch.Phase, ch.DueAt = Adopted, catalog.PhaseActive, nil
		ch.Reason = fmt.Sprintf("was Scheduled for deletion at %s; back in its bundle", cur.DeletionDueAt.UTC().Format(time.RFC3339))
		return nil
	}
	if it.sameBody && slices.Equal(cur.Owners, want.Owners) { // same(cur, want), from the full resource read earlier
		ch.Action = Unchanged
		return nil
	}
	it.desired = want
	ch.Action = Updated
	return nil
}

// resolveOwner finds an owner by kind and name: in the dependent's
// namespace, then cluster-scoped; in this apply first, then the catalog.
func (e *Engine) resolveOwner(ctx context.Context, p *plan, d *manifest.Document, o manifest.OwnerReference) (catalog.OwnerRef, *item, error) {
	keys := []catalog.Key{{Kind: o.Kind, Namespace: d.Metadata.Namespace, Name: o.Name}}
	if d.Metadata.Namespace != "" {
		keys = append(keys, catalog.Key{Kind: o.Kind, Name: o.Name})
	}
	ref := catalog.OwnerRef{Kind: o.Kind, Name: o.Name, BlockOwnerDeletion: o.BlockOwnerDeletion}
	check := func(k catalog.Key, uid string, phase catalog.Phase) error {
		switch {
		case o.UID != "" && o.UID != uid:
			return fmt.Errorf("owner %s has uid %s, not %s", k, uid, o.UID)
		case phase == catalog.PhaseDeleting:
			return fmt.Errorf("owner %s is being deleted: a new dependent would outlive it", k)
		}
		return nil
	}
	for _, k := range keys {
		if it, ok := p.byKey[k]; ok {
			if it.cur != nil {
				if err := check(k, it.cur.UID, it.cur.Phase); err != nil {
					return ref, nil, err
				}
				ref.UID = it.cur.UID
			} else {
				// Read from the stored phases, not from skipped: the owner
				// may be listed after the dependent, and planned after it.
				if it.bundle != nil && it.bundle.cur != nil && it.bundle.cur.Phase != catalog.PhaseActive {
					return ref, nil, fmt.Errorf("owner %s is not being applied: its bundle is pending deletion", k)
				}
				ref.UID = it.newUID()
				if o.UID != "" && o.UID != ref.UID {
					return ref, nil, fmt.Errorf("owner %s is created by this apply, so it cannot have uid %s", k, o.UID)
				}
			}
			return ref, it, nil
		}
		r, err := e.st.Get(ctx, k)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return ref, nil, err
		}
		if err := check(k, r.UID, r.Phase); err != nil {
			return ref, nil, err
		}
		ref.UID = r.UID
		return ref, nil, nil
	}
	where := keys[0].String()
	if len(keys) > 1 {
		where += " or " + keys[1].String()
	}
	return ref, nil, fmt.Errorf("owner %s does not exist (in the catalog or in this apply)", where)
}

// reservedKind says why apply does not write kind, a kind Lethe keeps
// itself; "" for any other kind.
func reservedKind(kind string) string {
	switch kind {
	case backup.Kind:
		return "apply does not write Backups: register one with 'lethe backup create'"
	case storageloc.Kind:
		return "apply does not write BackupStorageLocations: Lethe records what it sees of the locations configured with --location (or the config file's location list)"
	case "LeaderLease", "AuditEntry", "RetryItem":
		return "apply does not write " + kind + "s: Lethe keeps them itself"
	}
	return ""
}
