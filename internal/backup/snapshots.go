package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/lethehq/lethe/internal/archive"
	"github.com/lethehq/lethe/internal/blobstore"
	"github.com/lethehq/lethe/internal/velero"
	"github.com/lethehq/lethe/pkg/plugin"
)

// ErrVolumeSnapshotsUnusable means a backup's list of native volume
// snapshots cannot be used: unreadable, corrupt, gone although it was
// recorded, or not the list recorded. No plugin runs and nothing is
// purged until it is back (or the operator abandons the backup).
var ErrVolumeSnapshotsUnusable = errors.New("volume snapshot list unusable")

// VolumeSnapshotsKey is where the backup's list of native volume
// snapshots is: the key recorded, else the one beside its tarball in a
// Velero backup folder; "" when it has none.
func (s *Spec) VolumeSnapshotsKey() string {
	if s.VolumeSnapshots != nil {
		return s.VolumeSnapshots.Key
	}
	return velero.VolumeSnapshotsKeyBeside(s.StorageKey)
}

// ReadVolumeSnapshots reads and parses the list of native volume
// snapshots at key. A missing file is blobstore.ErrNotFound (wrapped);
// one that cannot be parsed is ErrVolumeSnapshotsUnusable. The info
// returned identifies what was read.
func ReadVolumeSnapshots(ctx context.Context, bl blobstore.Store, key string) ([]velero.SnapshotItem, *VolumeSnapshotsInfo, error) {
	rc, err := bl.Open(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("volume snapshot list %s: %w", blobstore.ObjectURL(bl.URL(), key), err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, velero.MaxVolumeSnapshotsSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("volume snapshot list %s: reading: %w", blobstore.ObjectURL(bl.URL(), key), err)
	}
	if len(data) > velero.MaxVolumeSnapshotsSize {
		return nil, nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrVolumeSnapshotsUnusable, key, velero.MaxVolumeSnapshotsSize)
	}
	sum := sha256.Sum256(data)
	items, err := velero.ParseVolumeSnapshots(data, key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrVolumeSnapshotsUnusable, err)
	}
	return items, &VolumeSnapshotsInfo{Key: key, Digest: hex.EncodeToString(sum[:]), Count: int64(len(items))}, nil
}

// SnapshotItem is the item the deletion pipeline hands to plugins for the
// native volume snapshot s, at ordinal (after the tarball's items).
func SnapshotItem(ordinal int64, s *velero.SnapshotItem) *archive.Item {
	return &archive.Item{
		Ordinal: ordinal, Group: plugin.NativeVolumeSnapshotGroup, Version: plugin.NativeVolumeSnapshotVersion,
		Resource: plugin.NativeVolumeSnapshotResource, Kind: plugin.NativeVolumeSnapshotKind,
		Name: s.Name, Labels: s.Labels, Object: s.Object,
	}
}
