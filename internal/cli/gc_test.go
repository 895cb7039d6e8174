package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
	"github.com/lethehq/lethe/internal/catalog/drivers"
)

// gcHome makes a home whose catalog holds: App a owns Volume c
// (blockOwnerDeletion); Restore d, Active, holds a block reference to c;
// Bucket logs has a user finalizer.
func gcHome(t *testing.T) (string, catalog.Store) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, "plugins"), 0o750))
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	a, err := st.Create(ctx, &catalog.Resource{Kind: "App", Namespace: "prod", Name: "a"})
	require.NoError(t, err)
	c, err := st.Create(ctx, &catalog.Resource{Kind: "Volume", Namespace: "prod", Name: "c",
		Owners: []catalog.OwnerRef{{UID: a.UID, Kind: "App", Name: "a", BlockOwnerDeletion: true}}})
	require.NoError(t, err)
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Restore", Namespace: "prod", Name: "d",
		References: []catalog.Reference{{Kind: "Volume", Namespace: "prod", Name: c.Name, OnTargetDelete: catalog.RefBlock}}})
	require.NoError(t, err)
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Bucket", Namespace: "prod", Name: "logs", Finalizers: []string{"example.com/empty-first"}})
	require.NoError(t, err)
	return home, st
}

func TestDeleteExplainFinalize(t *testing.T) {
	home, st := gcHome(t)

	// A direct delete of a block target is refused at once, naming the
	// referrer; nothing changes.
	code, _, stderr := run(t, home, false, "", "delete", "Volume", "c", "-n", "prod", "--yes")
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "Restore/prod/d")

	// Dry run: the plan, nothing changed.
	code, out, stderr := run(t, home, false, "", "delete", "App", "a", "-n", "prod", "--dry-run", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var plan struct {
		Entries []struct {
			Action   string      `json:"action"`
			Resource catalog.Key `json:"resource"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plan))
	require.Len(t, plan.Entries, 3)
	require.Equal(t, "blocked", plan.Entries[2].Action)
	r, err := st.Get(context.Background(), catalog.Key{Kind: "App", Namespace: "prod", Name: "a"})
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, r.Phase)

	// --wait: the cascade runs here and ends stuck (exit 3), explained.
	code, out, stderr = run(t, home, false, "", "delete", "App", "a", "-n", "prod", "--yes", "--wait")
	require.Equal(t, exitIncomplete, code, stderr)
	require.Contains(t, out, "Volume/prod/c is blocked by Restore/prod/d")

	code, out, stderr = run(t, home, false, "", "explain", "Volume", "c", "-n", "prod", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var e struct {
		Resource   catalog.Key `json:"resource"`
		Phase      string      `json:"phase"`
		Reason     string      `json:"reason"`
		WaitingFor []struct {
			Resource catalog.Key `json:"resource"`
			Phase    string      `json:"phase"`
		} `json:"waitingFor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	require.Equal(t, "Deleting", e.Phase)
	require.Equal(t, "Restore", e.WaitingFor[0].Resource.Kind)
	require.Equal(t, "Active", e.WaitingFor[0].Phase)

	// The referrer goes; the cascade finishes.
	code, _, stderr = run(t, home, false, "", "delete", "Restore", "d", "-n", "prod", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, home, false, "", "delete", "App", "a", "-n", "prod", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)
	code, out, _ = run(t, home, false, "", "explain", "App", "a", "-n", "prod")
	require.Equal(t, 0, code)
	require.Contains(t, out, "(Purged)")

	// A user finalizer: stuck until finalize.
	code, out, _ = run(t, home, false, "", "delete", "Bucket", "logs", "-n", "prod", "--yes", "--wait")
	require.Equal(t, exitIncomplete, code)
	require.Contains(t, out, "waiting for finalizer example.com/empty-first")
	code, _, stderr = run(t, home, false, "", "finalize", "Bucket", "logs", "-n", "prod", "lethe.io/cascade")
	require.Equal(t, exitUsage, code, stderr)
	code, _, stderr = run(t, home, false, "", "finalize", "Bucket", "logs", "-n", "prod", "example.com/empty-first")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, home, false, "", "delete", "Bucket", "logs", "-n", "prod", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)

	// Bad input: one line, its exit code.
	code, _, stderr = run(t, home, false, "", "delete", "Bucket", "nope", "-n", "prod", "--yes")
	require.Equal(t, exitNotFound, code, stderr)
	code, _, _ = run(t, home, false, "", "delete", "Bucket", "x", "--cascade", "sideways")
	require.Equal(t, exitUsage, code)
	code, _, _ = run(t, home, false, "", "explain", "Bucket", "nope")
	require.Equal(t, exitNotFound, code)
}

// TestDeleteBackupIsBackupDelete: `lethe delete backup NAME` runs the
// backup deletion, then the collector on the backup's dependents.
func TestDeleteBackupIsBackupDelete(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := run(t, home, false, "", "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	b, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: "b1"})
	require.NoError(t, err)
	snap, err := st.Create(ctx, &catalog.Resource{Kind: "VolumeSnapshot", Namespace: "prod", Name: "snap-a",
		Owners: []catalog.OwnerRef{{UID: b.UID, Kind: "Backup", Name: "b1", BlockOwnerDeletion: true}}})
	require.NoError(t, err)

	code, _, stderr = run(t, home, false, "", "delete", "backup", "b1", "--yes", "--wait", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	for _, k := range []catalog.Key{b.Key(), snap.Key()} {
		_, err := st.Get(ctx, k)
		require.ErrorIs(t, err, catalog.ErrNotFound, "%s", k)
	}
}

// TestBackupDeleteCascade: a backup's purge waits for its Foreground
// dependents with blockOwnerDeletion (stuck on a user finalizer: exit 3,
// explained, tarball kept) until lethe finalize releases them; and
// --cascade=orphan, shown by --dry-run, keeps the dependents without the
// owner edge.
func TestBackupDeleteCascade(t *testing.T) {
	home, tarball := newHome(t)
	for _, n := range []string{"b1", "b2"} {
		code, _, stderr := run(t, home, false, "", "backup", "create", n, "--from", tarball)
		require.Equal(t, 0, code, stderr)
	}
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	owned := func(backupName, name string, fins ...string) *catalog.Resource {
		b, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: backupName})
		require.NoError(t, err)
		r, err := st.Create(ctx, &catalog.Resource{Kind: "VolumeSnapshot", Namespace: "prod", Name: name, Finalizers: fins,
			Owners: []catalog.OwnerRef{{UID: b.UID, Kind: "Backup", Name: backupName, BlockOwnerDeletion: true}}})
		require.NoError(t, err)
		return r
	}
	snapA := owned("b1", "snap-a", "example.com/drain")

	code, out, stderr := run(t, home, false, "", "backup", "delete", "b1", "--yes", "--no-plugins")
	require.Equal(t, exitIncomplete, code, stderr)
	require.Contains(t, out, "its purge waits for dependent VolumeSnapshot/prod/snap-a")
	require.Contains(t, out, "Backup/b1 is stuck")
	require.Contains(t, out, "example.com/drain")
	b1, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: "b1"})
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseDeleting, b1.Phase)
	code, out, stderr = run(t, home, false, "", "explain", "backup", "b1", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var e struct {
		Reason     string `json:"reason"`
		WaitingFor []struct {
			Resource catalog.Key `json:"resource"`
		} `json:"waitingFor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	require.Contains(t, e.Reason, "blockOwnerDeletion")
	require.Len(t, e.WaitingFor, 1)
	require.Equal(t, snapA.Key(), e.WaitingFor[0].Resource)
	code, out, stderr = run(t, home, false, "", "backup", "describe", "b1", "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"waitingFor"`)
	code, out, stderr = run(t, home, false, "", "backup", "describe", "b1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "its purge waits for dependent VolumeSnapshot/prod/snap-a")

	code, _, stderr = run(t, home, false, "", "finalize", "VolumeSnapshot", "snap-a", "-n", "prod", "example.com/drain")
	require.Equal(t, 0, code, stderr)
	code, out, stderr = run(t, home, false, "", "delete", "backup", "b1", "--yes", "--wait", "--no-plugins")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Backup/b1: purged")
	for _, k := range []catalog.Key{b1.Key(), snapA.Key()} {
		_, err := st.Get(ctx, k)
		require.ErrorIs(t, err, catalog.ErrNotFound, "%s", k)
	}

	// A live block reference refuses a direct delete at once (exit 5).
	_, err = st.Create(ctx, &catalog.Resource{Kind: "Restore", Name: "r",
		References: []catalog.Reference{{Kind: "Backup", Name: "b2", OnTargetDelete: catalog.RefBlock}}})
	require.NoError(t, err)
	code, _, stderr = run(t, home, false, "", "delete", "backup", "b2", "--yes", "--no-plugins")
	require.Equal(t, exitRefused, code, stderr)
	require.Contains(t, stderr, "block references from Restore/r")
	code, _, stderr = run(t, home, false, "", "delete", "Restore", "r", "--yes", "--wait")
	require.Equal(t, 0, code, stderr)

	// Orphan: the plan says so, and nothing changes until asked.
	snapB := owned("b2", "snap-b")
	code, out, stderr = run(t, home, false, "", "delete", "backup", "b2", "--cascade=orphan", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `orphan\s+VolumeSnapshot/prod/snap-b`, out)
	code, out, stderr = run(t, home, false, "", "backup", "delete", "b2", "--cascade=orphan", "--dry-run", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var plan struct {
		Cascade struct {
			Propagation string `json:"propagation"`
			Entries     []struct {
				Action   string      `json:"action"`
				Resource catalog.Key `json:"resource"`
			} `json:"entries"`
		} `json:"cascade"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plan))
	require.Equal(t, "Orphan", plan.Cascade.Propagation)
	require.Len(t, plan.Cascade.Entries, 2)
	require.Equal(t, "orphan", plan.Cascade.Entries[1].Action)
	require.Equal(t, snapB.Key(), plan.Cascade.Entries[1].Resource)
	b2, err := st.Get(ctx, catalog.Key{Kind: "Backup", Name: "b2"})
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, b2.Phase, "a dry run changes nothing")

	code, out, stderr = run(t, home, false, "", "delete", "backup", "b2", "--cascade=orphan", "--yes", "--wait", "--no-plugins")
	require.Equal(t, 0, code, stderr+out)
	_, err = st.Get(ctx, b2.Key())
	require.ErrorIs(t, err, catalog.ErrNotFound)
	x, err := st.Get(ctx, snapB.Key())
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseActive, x.Phase)
	require.Empty(t, x.Owners)
}

// TestDescribeMarksAnOwnerThatIsGone: describe lists an owner that no
// longer exists (purged, before the collector handled its dependents) as
// gone, in the table and in -o json.
func TestDescribeMarksAnOwnerThatIsGone(t *testing.T) {
	home, st := gcHome(t)
	ctx := context.Background()
	a := catalog.Key{Kind: "App", Namespace: "prod", Name: "a"}
	code, out, stderr := run(t, home, false, "", "describe", "Volume", "c", "-n", "prod")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "(blocks owner deletion), Active")
	_, err := st.Delete(ctx, a, catalog.DeleteOptions{})
	require.NoError(t, err)
	require.NoError(t, st.Purge(ctx, a, catalog.PurgeOptions{}))
	code, out, stderr = run(t, home, false, "", "describe", "Volume", "c", "-n", "prod")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "(blocks owner deletion), gone (no longer exists)")
	code, out, stderr = run(t, home, false, "", "describe", "Volume", "c", "-n", "prod", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var v struct {
		Owners []struct {
			Name string `json:"name"`
			Gone bool   `json:"gone"`
		} `json:"owners"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Len(t, v.Owners, 1)
	require.True(t, v.Owners[0].Gone)
}

// TestBackupDescribeNamesTheCascadeRoot: a backup a cascade reached says
// whose cascade it is in, in text and in its object.
func TestBackupDescribeNamesTheCascadeRoot(t *testing.T) {
	home, tarball := newHome(t)
	code, _, stderr := run(t, home, false, "", "backup", "create", "b1", "--from", tarball)
	require.Equal(t, 0, code, stderr)
	ctx := context.Background()
	st, err := drivers.Open(ctx, "sqlite://"+filepath.Join(home, "lethe.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	o, err := st.Create(ctx, &catalog.Resource{Kind: "Schedule", Namespace: "velero", Name: "nightly"})
	require.NoError(t, err)
	root := o.Ref()
	_, err = st.Schedule(ctx, catalog.Key{Kind: "Backup", Name: "b1"}, catalog.ScheduleOptions{Delay: time.Hour, Root: &root})
	require.NoError(t, err)
	code, out, stderr := run(t, home, false, "", "backup", "describe", "b1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "Cascade of: Schedule/velero/nightly "+o.UID)
	code, out, stderr = run(t, home, false, "", "backup", "describe", "b1", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var v struct {
		Lifecycle struct {
			Root *catalog.ObjectRef `json:"deletionRoot"`
		} `json:"lifecycle"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, &root, v.Lifecycle.Root)
}
