package velero

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/lethehq/lethe/internal/termtext"
	"github.com/lethehq/lethe/pkg/plugin"
)

// MaxVolumeSnapshotsSize caps the size of a
// <name>-volumesnapshots.json.gz Lethe reads, stored and decompressed: an
// entry is a few hundred bytes, so this is tens of thousands of snapshots.
const MaxVolumeSnapshotsSize = 16 << 20

// MaxVolumeSnapshots caps the number of entries of a volume snapshot list:
// a backup takes one native snapshot per persistent volume. The list is
// decoded one entry at a time, so a small gzip bomb of tiny entries is
// refused at the cap, before it costs any memory.
const MaxVolumeSnapshots = 10000

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
	dec := json.NewDecoder(&capReader{r: zr, left: MaxVolumeSnapshotsSize})
	bad := func(err error) error {
		if errors.Is(err, errTooLarge) {
			return fmt.Errorf("%s is larger than %d bytes decompressed; refusing it", key, MaxVolumeSnapshotsSize)
		}
		return fmt.Errorf("%s is not a JSON list of volume snapshots: %w", key, err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, bad(err)
	}
	var items []SnapshotItem
	switch tok {
	case nil: // null: the backup took none
	case json.Delim('['):
		taken := map[string]bool{}
		for i := 0; dec.More(); i++ {
			if i == MaxVolumeSnapshots {
				return nil, fmt.Errorf("%s lists more than %d volume snapshots; refusing it", key, MaxVolumeSnapshots)
			}
			var e json.RawMessage
			if err := dec.Decode(&e); err != nil {
				return nil, bad(err)
			}
			it, err := snapshotItem(e, i, key, taken)
			if err != nil {
				return nil, err
			}
			items = append(items, it)
		}
		if _, err := dec.Token(); err != nil {
			return nil, bad(err)
		}
	default:
		return nil, fmt.Errorf("%s is not a JSON list of volume snapshots: it starts with %v", key, tok)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if errors.Is(err, errTooLarge) {
			return nil, bad(err)
		}
		return nil, fmt.Errorf("%s holds more than one JSON value", key)
	}
	if items == nil {
		items = []SnapshotItem{}
	}
	return items, nil
}

// snapshotItem is the item of entry i of a volume snapshot list; taken
// are the names given so far.
func snapshotItem(e json.RawMessage, i int, key string, taken map[string]bool) (SnapshotItem, error) {
	var s struct {
		Spec   json.RawMessage `json:"spec"`
		Status json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(e, &s); err != nil || !isObject(s.Spec) {
		return SnapshotItem{}, fmt.Errorf("%s: entry %d is not a volume snapshot (an object with a spec object)", key, i)
	}
	if s.Status == nil || string(s.Status) == "null" {
		s.Status = json.RawMessage("{}")
	}
	var typed struct {
		Spec   plugin.NativeVolumeSnapshotSpec   `json:"spec"`
		Status plugin.NativeVolumeSnapshotStatus `json:"status"`
	}
	if err := json.Unmarshal(e, &typed); err != nil {
		return SnapshotItem{}, fmt.Errorf("%s: entry %d: %w", key, i, err)
	}
	name := typed.Spec.PersistentVolumeName
	if r, bad := termtext.Control(name); bad {
		return SnapshotItem{}, fmt.Errorf("%s: entry %d: persistentVolumeName %s holds %s, which no Kubernetes name can", key, i, strconv.Quote(name), termtext.Describe(r))
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
		return SnapshotItem{}, fmt.Errorf("%s: entry %d: %w", key, i, err)
	}
	return SnapshotItem{Name: name, Labels: labels, Object: obj, ProviderSnapshotID: typed.Status.ProviderSnapshotID}, nil
}

// errTooLarge is capReader's error past its cap.
var errTooLarge = errors.New("too large")

// capReader reads r until left bytes are read, then fails with
// errTooLarge, so that a decoder stops at the cap instead of taking the
// truncated input for a malformed one.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func isObject(m json.RawMessage) bool {
	t := bytes.TrimSpace(m)
	return len(t) > 0 && t[0] == '{'
}
