package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/velero"
)

// UploadMarkerFile is the file that `lethe backup create` stores in a
// backup's folder before it uploads the tarball, and removes once the
// backup is in the catalog. A sync never imports a folder that holds one:
// the tarball is a create's, half-registered, and importing it would
// record the backup without what the create was given (its TTL, labels
// and annotations). It plays the part of Velero's phase InProgress.
const UploadMarkerFile = "lethe-upload.json"

// UploadMarkerKey is the key of the upload marker of the backup name.
func UploadMarkerKey(name string) string { return velero.BackupDir(name) + UploadMarkerFile }

// uploadMarker is the marker's content, for the person who finds one.
type uploadMarker struct {
	Kind      string    `json:"kind"` // "BackupUpload"
	Name      string    `json:"name"`
	StartedAt time.Time `json:"startedAt"`
}

// putUploadMarker stores the marker of the backup name.
func (g *Registry) putUploadMarker(ctx context.Context, name string, now time.Time) error {
	data, err := json.Marshal(uploadMarker{Kind: "BackupUpload", Name: name, StartedAt: now.UTC()})
	if err != nil {
		return err
	}
	return g.cfg.Blobs.Put(ctx, UploadMarkerKey(name), bytes.NewReader(data))
}

// uploadInProgress says why the folder of name must not be imported
// because it holds an upload marker, or "" when it holds none. A marker
// that cannot be looked at is an error: unknown is not absent.
func (g *Registry) uploadInProgress(ctx context.Context, name string) (string, error) {
	key := UploadMarkerKey(name)
	a, err := g.cfg.Blobs.Stat(ctx, key)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("looking for %s: %w", key, err)
	}
	return fmt.Sprintf("being registered by 'lethe backup create' (upload started %s); imported only by that create. "+
		"If no create is running, it was interrupted: remove %s and sync again",
		a.ModTime.UTC().Format(time.RFC3339), key), nil
}
