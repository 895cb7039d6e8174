package registry_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/archive/archivetest"
	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/registry"
)

// syncAfterUpload is storage that runs a sync once, as a server's storage
// sync would, right after a create has stored its tarball and before the
// create records the backup: the create's Stat of what it stored is
// where the two meet.
type syncAfterUpload struct {
	blobstore.Store
	key  string
	once sync.Once
	sync func() ([]registry.SyncResult, error)
	got  []registry.SyncResult
	err  error
}

func (s *syncAfterUpload) Stat(ctx context.Context, key string) (blobstore.Attributes, error) {
	if key == s.key {
		if _, err := s.Store.Stat(ctx, key); err == nil {
			s.once.Do(func() { s.got, s.err = s.sync() })
		}
	}
	return s.Store.Stat(ctx, key)
}

// TestSyncLeavesACreatesUploadToTheCreate: a sync that runs between a
// create's upload and its catalog row does not import the tarball (which
// would record the backup without the create's TTL and fail the create
// with "already exists"); the create registers it with its TTL, and the
// next sync finds it in the catalog.
func TestSyncLeavesACreatesUploadToTheCreate(t *testing.T) {
	e := newEnv(t, false)
	ctx := e.Ctx
	plain, err := registry.New(&registry.Config{Store: e.Store, Blobs: e.Blobs, Plugins: e.Host})
	require.NoError(t, err)
	racing := &syncAfterUpload{Store: e.Blobs, key: backup.StorageKey("nightly"), sync: func() ([]registry.SyncResult, error) {
		return plain.Sync(ctx, registry.SyncOptions{})
	}}
	reg, err := registry.New(&registry.Config{Store: e.Store, Blobs: racing, Plugins: e.Host})
	require.NoError(t, err)

	res, err := reg.Create(ctx, registry.Request{Name: "nightly", Tarball: tarball(t, mixed(), archivetest.Gzip), TTL: 720 * time.Hour})
	require.NoError(t, err, "the create owns its upload")
	require.NoError(t, racing.err)
	require.Len(t, racing.got, 1, "the sync ran in the middle of the create")
	require.Equal(t, registry.SyncSkipped, racing.got[0].Action, racing.got[0].Reason)
	require.Contains(t, racing.got[0].Reason, "being registered by 'lethe backup create'")
	require.Equal(t, backup.Duration(720*time.Hour), res.Backup.Spec.TTL)

	r, err := e.Store.Get(ctx, backup.Key("nightly"))
	require.NoError(t, err)
	b, err := backup.FromResource(r)
	require.NoError(t, err)
	require.NotNil(t, b.Spec.ExpiresAt, "recorded with the create's TTL")
	require.NotContains(t, r.Annotations, registry.AnnotationImportedFrom)

	// The marker is gone, and the next sync finds the backup in the catalog.
	_, err = e.Blobs.Stat(ctx, registry.UploadMarkerKey("nightly"))
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	again, err := plain.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, registry.SyncSkipped, again[0].Action)
	require.Contains(t, again[0].Reason, "in the catalog")
}

// TestInterruptedUploadIsNeverImported: a create killed after its upload
// leaves its marker; a sync reports the folder and imports nothing, and a
// new create of the name says what to do. Once the marker is removed, the
// sync imports the tarball.
func TestInterruptedUploadIsNeverImported(t *testing.T) {
	e := newEnv(t, false)
	ctx := e.Ctx
	require.NoError(t, e.Blobs.Put(ctx, registry.UploadMarkerKey("nightly"), tarball(t, nil, archivetest.Gzip)))
	require.NoError(t, e.Blobs.Put(ctx, backup.StorageKey("nightly"), tarball(t, mixed(), archivetest.Gzip)))

	for _, dry := range []bool{true, false} {
		got, err := e.Registry.Sync(ctx, registry.SyncOptions{DryRun: dry})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, registry.SyncSkipped, got[0].Action, "dry run %v", dry)
		require.Contains(t, got[0].Reason, "remove "+registry.UploadMarkerKey("nightly")+" and sync again")
	}
	_, err := e.Registry.Create(ctx, registry.Request{Name: "nightly", Tarball: tarball(t, mixed(), archivetest.Gzip)})
	require.ErrorIs(t, err, registry.ErrAlreadyExists)
	require.Contains(t, err.Error(), "being registered by 'lethe backup create'")
	_, err = e.Blobs.Stat(ctx, registry.UploadMarkerKey("nightly"))
	require.NoError(t, err, "a refused create leaves the marker it found")

	require.NoError(t, e.Blobs.Delete(ctx, registry.UploadMarkerKey("nightly")))
	got, err := e.Registry.Sync(ctx, registry.SyncOptions{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, registry.SyncImported, got[0].Action, got[0].Reason)
}
