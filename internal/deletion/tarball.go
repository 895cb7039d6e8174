package deletion

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/pluginhost"
)

// ErrTarballMissing means a backup's tarball is not in its storage location.
var ErrTarballMissing = errors.New("tarball missing")

// ErrTarballReplaced means the object at a backup's storage key is not
// the tarball registered (its sha256 differs from the recorded digest).
var ErrTarballReplaced = errors.New("tarball replaced")

// tarballUnusable reports whether err says that no plugin can run on the
// backup's items because its tarball is missing or replaced: only the
// abandon path (Options.ForcePurge) gets past it.
func tarballUnusable(err error) bool {
	return errors.Is(err, ErrTarballMissing) || errors.Is(err, ErrTarballReplaced)
}

// blobsFor opens the storage location the backup was registered in (the
// configured storage for a backup that recorded none), once checkStorage
// has found that its row names its own storage: every read and delete of
// a deletion goes through here.
func (d *Deleter) blobsFor(ctx context.Context, b *backup.Backup) (blobstore.Store, error) {
	if err := d.checkStorage(b); err != nil {
		return nil, err
	}
	bl, err := d.cfg.Locations.Open(ctx, b.Spec.StorageLocation)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
	}
	return bl, nil
}

// tarballURL is where the backup's tarball is, for messages and plugins.
func (d *Deleter) tarballURL(ctx context.Context, b *backup.Backup) string {
	loc := d.cfg.Blobs.URL()
	if bl, err := d.cfg.Locations.Open(ctx, b.Spec.StorageLocation); err == nil {
		loc = bl.URL()
	} else if l, err := blobstore.Location(b.Spec.StorageLocation); err == nil {
		loc = l
	}
	return blobstore.ObjectURL(loc, b.Spec.StorageKey)
}

// validate checks the tarball before anything changes, in the storage
// location the backup recorded, without reading it when it can: the one
// read of a deletion is the pass that feeds the plugins, which is pinned
// to the object registered (see openItems), hashes as it streams and
// checks the digest at the end, before anything is purged (see
// runPlugins).
//
// A backup registered with a digest must find, at its key, an object of
// the recorded size and, when one was recorded, of the recorded storage
// identity (backup.Spec.StorageVersion: an S3 ETag, a file's mtime and
// inode), so that an object put in its place, even of the same size, is
// noticed before any plugin runs. Any other object is read, pinned to the
// identity found: with another sha256 it is refused with
// ErrTarballReplaced, whatever it contains (its items are not this
// backup's); with the registered sha256 it is the registered tarball put
// back (copied, restored), and the run goes on pinned to the identity
// found, which replaces the recorded one in b (in memory). A backup
// registered without a digest has its tarball validated in full (one
// more read), and a hostile one refused. A missing tarball is
// ErrTarballMissing.
func (d *Deleter) validate(ctx context.Context, b *backup.Backup) (*archive.Summary, error) {
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, err
	}
	where := blobstore.ObjectURL(bl.URL(), b.Spec.StorageKey)
	missing := func() error {
		return fmt.Errorf("backup %s: %w: %s is gone from storage; no plugin can run on its items", b.Name(), ErrTarballMissing, where)
	}
	registered := &archive.Summary{Items: b.Spec.Items, Digest: b.Spec.Digest, CopyOnlyItems: b.Spec.CopyOnlyItems}
	var found blobstore.Version
	if b.Spec.Digest != "" {
		a, err := bl.Stat(ctx, b.Spec.StorageKey)
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, missing()
		}
		if err != nil {
			return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
		}
		if (b.Spec.Size <= 0 || a.Size == b.Spec.Size) && b.Spec.StorageVersion.Matches(a.Version) {
			return registered, nil
		}
		found = a.Version
	}
	rc, err := bl.OpenVersion(ctx, b.Spec.StorageKey, found)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, missing()
	}
	if errors.Is(err, blobstore.ErrVersionMismatch) {
		return nil, fmt.Errorf("backup %s: %w: %s changed since registration, and again while it was checked (%w); "+
			"its items may not be this backup's, so no plugin runs and nothing changed", b.Name(), ErrTarballReplaced, where, err)
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
	}
	defer rc.Close()
	if b.Spec.Digest == "" {
		sum, err := archive.Validate(rc, d.cfg.Limits)
		if err != nil {
			return nil, fmt.Errorf("backup %s: %w", b.Name(), err)
		}
		return sum, nil
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, rc, make([]byte, 1<<20)); err != nil {
		return nil, fmt.Errorf("backup %s: reading tarball %s: %w", b.Name(), where, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != b.Spec.Digest {
		return nil, d.replaced(b, where, sum)
	}
	// The registered bytes, in another object: the run reads that one.
	b.Spec.StorageVersion = found
	return registered, nil
}

// replaced is the ErrTarballReplaced error for a tarball whose sha256 is
// found.
func (d *Deleter) replaced(b *backup.Backup, where, found string) error {
	return fmt.Errorf("backup %s: %w: %s has sha256 %s, but sha256 %s was recorded at registration; "+
		"its items are not this backup's, so no plugin runs and nothing changed", b.Name(), ErrTarballReplaced, where, found, b.Spec.Digest)
}

// noteTarball records on the backup what validate found: the condition
// TarballMissing or TarballReplaced becomes True (logged once, when it
// turns True), or False again once the tarball is usable. It writes only
// when a condition changes, so repeated runs change nothing.
func (d *Deleter) noteTarball(ctx context.Context, b *backup.Backup, verr error, opts Options) {
	if verr != nil && !tarballUnusable(verr) {
		return // nothing learnt about the tarball (storage unreachable, say)
	}
	ctx = context.WithoutCancel(ctx)
	for range 3 {
		cur, err := d.cfg.Store.Get(ctx, b.Resource.Key())
		if err != nil {
			return
		}
		now := d.now()
		changed, raised := false, ""
		for _, t := range []string{backup.ConditionTarballMissing, backup.ConditionTarballReplaced} {
			want := (t == backup.ConditionTarballMissing && errors.Is(verr, ErrTarballMissing)) ||
				(t == backup.ConditionTarballReplaced && errors.Is(verr, ErrTarballReplaced))
			i := slices.IndexFunc(cur.Conditions, func(c catalog.Condition) bool { return c.Type == t })
			switch {
			case want && (i < 0 || cur.Conditions[i].Status != "True"):
				setCondition(cur, catalog.Condition{Type: t, Status: "True", Reason: t, LastTransitionTime: now,
					Message: verr.Error() + "; the daemon will not retry it: delete it again once the tarball is back, or abandon it"})
				changed, raised = true, t
			case !want && i >= 0 && cur.Conditions[i].Status == "True":
				setCondition(cur, catalog.Condition{Type: t, Status: "False", Reason: "TarballFound", LastTransitionTime: now,
					Message: "the registered tarball is in storage"})
				changed = true
			}
		}
		if !changed {
			return
		}
		_, err = d.cfg.Store.Update(ctx, cur)
		if errors.Is(err, catalog.ErrConflict) {
			continue
		}
		// The daemon says it once in its log; an operator at the CLI gets
		// the error itself, and one line is enough.
		if err == nil && raised != "" && opts.Unattended {
			d.log.Warn("backup deletion cannot run: "+raised+"; it waits for an operator (delete it again once the tarball is back, or abandon it)",
				"backup", b.Name(), "error", verr.Error())
		}
		return
	}
}

// openItems opens the tarball for the pass that feeds plugins. A tarball
// Validate accepted with no copy-only items is read without per-item
// state, so memory stays flat whatever its size.
func (d *Deleter) openItems(ctx context.Context, b *backup.Backup, sum *archive.Summary) (*archive.Reader, func(), error) {
	bl, err := d.blobsFor(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	// Pinned to the object registered: one swapped in since validate
	// looked is refused here, before any item reaches a plugin.
	rc, err := bl.OpenVersion(ctx, b.Spec.StorageKey, b.Spec.StorageVersion)
	if errors.Is(err, blobstore.ErrVersionMismatch) {
		return nil, nil, fmt.Errorf("backup %s: %w: %s changed since registration: %w; "+
			"its items may not be this backup's, so no plugin runs and nothing changed",
			b.Name(), ErrTarballReplaced, blobstore.ObjectURL(bl.URL(), b.Spec.StorageKey), err)
	}
	if err != nil {
		return nil, nil, err
	}
	open := archive.NewReader
	if sum.CopyOnlyItems == 0 {
		open = archive.NewVerifiedReader
	}
	ar, err := open(rc, d.cfg.Limits)
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	if !slices.ContainsFunc(d.cfg.Plugins.Plugins(), func(in pluginhost.Info) bool {
		return in.Matcher != nil && in.Matcher.HasLabelSelector()
	}) {
		ar.SkipLabels()
	}
	return ar, func() { ar.Close(); rc.Close() }, nil
}
