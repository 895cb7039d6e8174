package velero

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/pkg/plugin"
)

// MaxVolumeSnapshotsSize caps the decompressed size of a
// <name>-volumesnapshots.json.gz Lethe reads: an entry is a few hundred
// bytes, so this is some hundred thousand snapshots.
const MaxVolumeSnapshotsSize = 64 << 20

// VolumeSnapshotsSuffix ends the name of the file, in a backup's folder,
// that lists the native volume snapshots the backup took.
const VolumeSnapshotsSuffix = "-volumesnapshots.json.gz"

// VolumeSnapshotsKeyBeside is the key of the volume snapshot list beside
// the tarball at tarballKey, when the tarball sits in a Velero backup
// folder as Velero names it (backups/<name>/<name>.tar.gz, or Lethe's
// .tar.zst); "" otherwise.
func VolumeSnapshotsKeyBeside(tarballKey string) string {
	name, file, ok := SplitKey(tarballKey)
	if !ok || (file != name+".tar.gz" && file != name+".tar.zst") {
		return ""
	}
	return VolumeSnapshotsKey(name)
}

// SnapshotItem is one native volume snapshot, as the item Lethe hands to
// plugins (see plugin.NativeVolumeSnapshot).
type SnapshotItem struct {
	Name   string
	Labels map[string]string
	// Object is the item's JSON.
	Object []byte
	// ProviderSnapshotID is status.providerSnapshotID, for messages.
	ProviderSnapshotID string
}

// ParseVolumeSnapshots reads the gzip JSON list Velero 1.18 writes in
// <name>-volumesnapshots.json.gz (an array of volume.Snapshot, or null
// when the backup took none) and returns one item per snapshot, in the
// file's order. key names the file in errors. Anything that is not such a
// list (not gzip, not JSON, an entry that is not an object with a spec
// object) is an error: a snapshot list Lethe cannot read is never taken
// for an empty one.
func ParseVolumeSnapshots(data []byte, key string) ([]SnapshotItem, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s is not gzip: %w", key, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, MaxVolumeSnapshotsSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: decompressing: %w", key, err)
	}
	if len(raw) > MaxVolumeSnapshotsSize {
		return nil, fmt.Errorf("%s is larger than %d bytes decompressed", key, MaxVolumeSnapshotsSize)
	}
	var list []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("%s is not a JSON list of volume snapshots: %w", key, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s holds more than one JSON value", key)
	}
	items := make([]SnapshotItem, 0, len(list))
	taken := map[string]bool{}
	for i, e := range list {
		var s struct {
			Spec   json.RawMessage `json:"spec"`
			Status json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal(e, &s); err != nil || !isObject(s.Spec) {
			return nil, fmt.Errorf("%s: entry %d is not a volume snapshot (an object with a spec object)", key, i)
		}
		if s.Status == nil || string(s.Status) == "null" {
			s.Status = json.RawMessage("{}")
		}
		var typed struct {
			Spec   plugin.NativeVolumeSnapshotSpec   `json:"spec"`
			Status plugin.NativeVolumeSnapshotStatus `json:"status"`
		}
		if err := json.Unmarshal(e, &typed); err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", key, i, err)
		}
		name := typed.Spec.PersistentVolumeName
		if r, bad := termtext.Control(name); bad {
			return nil, fmt.Errorf("%s: entry %d: persistentVolumeName %s holds %s, which no Kubernetes name can", key, i, strconv.Quote(name), termtext.Describe(r))
		}
		if name == "" || taken[name] || strings.ContainsAny(name, "/ \t\r\n") {
			name = "snapshot-" + strconv.Itoa(i)
		}
		taken[name] = true
		var labels map[string]string
		if typed.Spec.BackupName != "" {
			labels = map[string]string{plugin.BackupNameLabel: typed.Spec.BackupName}
		}
		obj, err := json.Marshal(struct {
			APIVersion string                          `json:"apiVersion"`
			Kind       string                          `json:"kind"`
			Metadata   plugin.NativeVolumeSnapshotMeta `json:"metadata"`
			Spec       json.RawMessage                 `json:"spec"`
			Status     json.RawMessage                 `json:"status"`
		}{plugin.NativeVolumeSnapshotAPIVersion, plugin.NativeVolumeSnapshotKind,
			plugin.NativeVolumeSnapshotMeta{Name: name, Labels: labels}, s.Spec, s.Status})
		if err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", key, i, err)
		}
		items = append(items, SnapshotItem{Name: name, Labels: labels, Object: obj, ProviderSnapshotID: typed.Status.ProviderSnapshotID})
	}
	return items, nil
}

func isObject(m json.RawMessage) bool {
	t := bytes.TrimSpace(m)
	return len(t) > 0 && t[0] == '{'
}
